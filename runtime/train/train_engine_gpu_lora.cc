// GpuTrainEngine under a LoRA adapter: its checkpoint (the whole adapter state on every rank: it
// is replicated and small). The update is the optimizer's over the adapter (GpuOptimizer).
#include "runtime/train/train_engine.h"

#if DELTATUNE_HAVE_CUDA
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/train/train_engine_gpu.h"

namespace deltatune {

namespace {
constexpr const char* kStateNames[3] = {"master.adapter", "m.adapter", "v.adapter"};
}  // namespace

ShardedStateIo GpuTrainEngine::lora_state_io() {
    ShardedStateIo io;
    io.group_sizes = {lora_->numel()};
    io.adam_step = adam_step_;
    io.save_shard = [this](const std::string& path) -> absl::Status {
        beat();
        std::vector<float> state[3];
        DT_RETURN_IF_ERROR(lora_->save_state(state[0], state[1], state[2]));
        std::vector<SafetensorsSpec> specs;
        for (const char* name : kStateNames) specs.push_back({name, DType::kF32, {lora_->numel()}});
        // Written from the vectors as they are (a Tensor copy of each doubled the host memory).
        return write_safetensors_streamed(path, specs,
                                          {{"rank", std::to_string(nccl_->rank())},
                                           {"world_size", std::to_string(nccl_->world_size())}},
                                          [&](size_t k, const SafetensorsWrite& write) {
                                              return write(state[k].data(),
                                                           state[k].size() * sizeof(float));
                                          });
    };
    // Every saved rank holds the same replicated state: rank 0's file serves any world size.
    io.load = [this](const std::vector<std::string>& files, int64_t adam_step) -> absl::Status {
        beat();
        if (files.empty()) return absl::InvalidArgumentError("LoRA state: no shard files");
        DT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(files[0]));
        std::vector<float> state[3];
        for (int k = 0; k < 3; ++k) {
            const SafetensorsEntry* e = f.entry(kStateNames[k]);
            if (!e) {
                return absl::NotFoundError(absl::StrCat(files[0], ": no '", kStateNames[k], "'"));
            }
            if (e->dtype != DType::kF32 ||
                e->end - e->begin != sizeof(float) * static_cast<size_t>(lora_->numel())) {
                return absl::InvalidArgumentError(absl::StrCat(
                    files[0], ": '", kStateNames[k], "' is [", absl::StrJoin(e->shape, ", "), "] ",
                    dtype_name(e->dtype), ", this adapter needs F32 [", lora_->numel(), "]"));
            }
            // Copied from the file's pages, which are given back (a view's copy kept both).
            state[k].resize(static_cast<size_t>(lora_->numel()));
            DT_RETURN_IF_ERROR(f.copy_bytes(kStateNames[k], 0, e->end - e->begin, state[k].data()));
        }
        DT_RETURN_IF_ERROR(lora_->load_state(state[0], state[1], state[2]));
        adam_step_ = adam_step;
        return absl::OkStatus();
    };
    return io;
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
