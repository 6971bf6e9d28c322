// A full fine-tuning checkpoint's masters read straight from its rank files
// (runtime/train/checkpoint_export.h), in both layouts, on the sharded multimodal fixture (GDN
// layers: a replicated segment in the GPU layout; BF16 and F32 tensors): the values written by
// open_checkpoint_masters are the parameters saved, converted to their stored dtypes; another
// model's checkpoint is refused.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/distributed/communicator.h"
#include "runtime/distributed/fsdp_cpu.h"
#include "runtime/model/gpu_param_layout.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/train/checkpoint_export.h"
#include "runtime/train/train_state.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

std::string fixture() {
    return testing::source_path("tests/fixtures/parity/tiny-b");
}

// Each parameter's bytes as open_checkpoint_masters gives them, against its values converted to
// the stored dtype.
void check_values(const HfModel& model, const ParamBytes& values) {
    const ParamBytes want = param_bytes_of(model.params);
    for (size_t i = 0; i < model.params.all().size(); ++i) {
        INFO(model.params.all()[i].name);
        std::string got, expected;
        REQUIRE(values(i, [&](const void* d, size_t n) {
                    got.append(static_cast<const char*>(d), n);
                    return absl::OkStatus();
                }).ok());
        REQUIRE(want(i, [&](const void* d, size_t n) {
                    expected.append(static_cast<const char*>(d), n);
                    return absl::OkStatus();
                }).ok());
        CHECK(got == expected);
    }
}

// The GPU ranks' file at world size 1: every unit padded to 128 elements, slots at their offsets,
// the fp32-read GDN weights in the replicated segment (as FsdpGpuParams::save_shard writes it).
absl::Status save_gpu_layout(const HfModel& m, const std::string& path) {
    const GpuParamLayout l = make_gpu_param_layout(m.config, m.params, true);
    std::vector<std::vector<float>> units(l.unit_numel.size());
    for (size_t u = 0; u < units.size(); ++u) {
        units[u].assign(static_cast<size_t>((l.unit_numel[u] + 127) / 128 * 128), 0.0f);
    }
    std::vector<float> rep(static_cast<size_t>(l.replicated_numel));
    for (size_t i = 0; i < l.slots.size(); ++i) {
        const GpuParamSlot& s = l.slots[i];
        const float* v = m.params.all()[i].value.data<float>();
        float* dst = s.replicated ? rep.data() : units[static_cast<size_t>(s.unit)].data();
        std::copy(v, v + s.numel, dst + s.offset);
    }
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const char* kind : {"master", "m", "v"}) {
        for (size_t u = 0; u < units.size(); ++u) {
            if (units[u].empty()) continue;
            const int64_t n = static_cast<int64_t>(units[u].size());
            tensors.emplace_back(std::string(kind) + ".unit." + std::to_string(u),
                                 Tensor::cpu_from({n}, units[u]));
        }
        tensors.emplace_back(std::string(kind) + ".replicated",
                             Tensor::cpu_from({l.replicated_numel}, rep));
    }
    return write_safetensors(path, tensors);
}

TEST_CASE("a checkpoint's masters are read from its rank files in either layout",
          "[train][checkpoint]") {
    auto model = load_hf_model(fixture());
    REQUIRE(model.ok());
    testing::TempDir tmp;
    LocalCommunicator comm;
    TrainState state;
    state.step = 7;

    // CPU ranks: the store's own file.
    HfModel cpu_model = *model;
    cpu_model.params = model->params.clone();
    ParamSet grads = cpu_model.params.zeros_like();
    auto store = FsdpCpuParams::create(cpu_model, grads, comm);
    REQUIRE(store.ok());
    ShardedStateIo cpu_io;
    cpu_io.group_sizes = (*store)->group_sizes();
    cpu_io.save_shard = [&](const std::string& path) { return (*store)->save_shard(path); };
    auto cpu = save_train_state(tmp.file("cpu"), state, cpu_io, comm);
    REQUIRE(cpu.ok());
    auto cpu_masters = open_checkpoint_masters(*model, cpu->path);
    REQUIRE(cpu_masters.ok());
    CHECK(cpu_masters->state.step == 7);
    check_values(*model, cpu_masters->values);

    // GPU ranks: the units' layout.
    const GpuParamLayout l = make_gpu_param_layout(model->config, model->params, true);
    ShardedStateIo gpu_io;
    gpu_io.group_sizes = l.unit_numel;
    gpu_io.group_sizes.push_back(l.replicated_numel);
    gpu_io.save_shard = [&](const std::string& path) { return save_gpu_layout(*model, path); };
    auto gpu = save_train_state(tmp.file("gpu"), state, gpu_io, comm);
    REQUIRE(gpu.ok());
    auto gpu_masters = open_checkpoint_masters(*model, gpu->path);
    REQUIRE(gpu_masters.ok());
    check_values(*model, gpu_masters->values);

    // Another model's checkpoint.
    auto other = load_hf_model(testing::source_path("tests/fixtures/parity/tiny-a"));
    REQUIRE(other.ok());
    const absl::Status refused = open_checkpoint_masters(*other, cpu->path).status();
    CHECK(absl::IsInvalidArgument(refused));
    CHECK(std::string(refused.message()).find("neither this model's CPU nor its GPU layout") !=
          std::string::npos);
}

}  // namespace
}  // namespace deltatune
