// Masters of a full fine-tuning checkpoint, read from its rank files (see checkpoint_export.h).
#include "runtime/train/checkpoint_export.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/distributed/fsdp_cpu.h"
#include "runtime/model/gpu_param_layout.h"

namespace deltatune {

namespace {

// One flat segment of masters, cut into equal shards over the saved ranks as the ranks that
// wrote it cut it, or whole in rank 0's file.
struct FlatGroup {
    enum class Cut { kCpuGroup, kGpuUnit, kReplicated };
    std::string tensor;  // "master.layer.3" (CPU), "master.unit.5" (GPU), "master.replicated"
    int64_t numel = 0;
    Cut cut = Cut::kCpuGroup;
    int64_t shard(int64_t world) const {
        switch (cut) {
            case Cut::kCpuGroup:
                return FsdpCpuParams::shard_size(numel, world);
            case Cut::kGpuUnit:
                return gpu_unit_shard(numel, world);
            case Cut::kReplicated:
                return numel;
        }
        return numel;
    }
};

struct MasterLayout {
    std::vector<FlatGroup> groups;
    std::vector<size_t> group;    // per parameter
    std::vector<int64_t> offset;  // per parameter, into its group
    std::vector<int64_t> sizes() const {
        std::vector<int64_t> out;
        for (const FlatGroup& g : groups) out.push_back(g.numel);
        return out;
    }
};

MasterLayout cpu_layout(const HfModel& model) {
    const FsdpCpuParams::Layout l = FsdpCpuParams::layout(model.params, model.config.num_layers);
    MasterLayout m;
    for (size_t g = 0; g < l.names.size(); ++g)
        m.groups.push_back({"master." + l.names[g], l.sizes[g]});
    m.group = l.unit;
    m.offset = l.offset;
    return m;
}

MasterLayout gpu_layout(const HfModel& model) {
    const GpuParamLayout l = make_gpu_param_layout(model.config, model.params, true);
    MasterLayout m;
    for (size_t u = 0; u < l.unit_numel.size(); ++u) {
        m.groups.push_back(
            {absl::StrCat("master.unit.", u), l.unit_numel[u], FlatGroup::Cut::kGpuUnit});
    }
    m.groups.push_back({"master.replicated", l.replicated_numel, FlatGroup::Cut::kReplicated});
    for (const GpuParamSlot& s : l.slots) {
        m.group.push_back(s.replicated ? l.unit_numel.size() : static_cast<size_t>(s.unit));
        m.offset.push_back(s.offset);
    }
    return m;
}

// The checkpoint's saved parameter groups (state.json), to pick the layout before verifying.
absl::StatusOr<std::vector<int64_t>> saved_groups(const std::string& dir) {
    DT_ASSIGN_OR_RETURN(const std::string text, read_file(dir + "/state.json"));
    try {
        return nlohmann::json::parse(text).at("group_sizes").get<std::vector<int64_t>>();
    } catch (const nlohmann::json::exception& e) {
        return absl::DataLossError(absl::StrCat(dir, "/state.json: ", e.what()));
    }
}

}  // namespace

absl::StatusOr<CheckpointMasters> open_checkpoint_masters(const HfModel& model,
                                                          const std::string& dir) {
    DT_ASSIGN_OR_RETURN(const std::vector<int64_t> saved, saved_groups(dir));
    auto layout = std::make_shared<MasterLayout>(cpu_layout(model));
    if (layout->sizes() != saved) *layout = gpu_layout(model);
    if (layout->sizes() != saved) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": parameter groups ", nlohmann::json(saved).dump(),
            " are neither this model's CPU nor its GPU layout (another model, or an adapter's "
            "state?)"));
    }
    auto files = std::make_shared<std::vector<SafetensorsFile>>();
    ShardedStateIo io;
    io.group_sizes = saved;
    io.load = [&](const std::vector<std::string>& rank_files, int64_t) -> absl::Status {
        for (const std::string& path : rank_files) {
            DT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
            files->push_back(std::move(f));
        }
        return absl::OkStatus();
    };
    CheckpointMasters out;
    DT_ASSIGN_OR_RETURN(out.state, load_train_state(dir, io));
    for (const FlatGroup& g : layout->groups) {
        if (g.numel == 0) continue;  // a tied model's empty embedding unit is not saved
        for (size_t r = 0; r < (g.cut == FlatGroup::Cut::kReplicated ? 1 : files->size()); ++r) {
            const SafetensorsEntry* e = (*files)[r].entry(g.tensor);
            if (!e || e->dtype != DType::kF32 ||
                e->end - e->begin != sizeof(float) * g.shard(static_cast<int64_t>(files->size()))) {
                return absl::InvalidArgumentError(absl::StrCat((*files)[r].path(), ": no F32 '",
                                                               g.tensor, "' of this model's size"));
            }
        }
    }
    out.values = [&model, layout, files](size_t i, const SafetensorsWrite& write) -> absl::Status {
        const NamedParam& p = model.params.all()[i];
        const FlatGroup& g = layout->groups[layout->group[i]];
        constexpr int64_t kPiece = 1 << 20;  // elements read and converted at a time
        std::vector<float> f32(static_cast<size_t>(std::min(kPiece, p.value.numel())));
        for (int64_t at = 0; at < p.value.numel(); at += kPiece) {
            const int64_t n = std::min(kPiece, p.value.numel() - at);
            const int64_t first = layout->offset[i] + at;
            DT_RETURN_IF_ERROR(copy_sharded_f32(*files, g.tensor,
                                                g.shard(static_cast<int64_t>(files->size())), first,
                                                first + n, f32.data()));
            DT_RETURN_IF_ERROR(write_f32_as(p.stored_dtype, f32.data(), n, write));
        }
        return absl::OkStatus();
    };
    return out;
}

}  // namespace deltatune
