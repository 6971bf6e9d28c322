// FsdpGpuParams' sharded checkpoint files (see fsdp_gpu.h).
#include "runtime/distributed/fsdp_gpu.h"

#if DELTATUNE_HAVE_CUDA
#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {

namespace {

constexpr const char* kKinds[3] = {"master", "m", "v"};
constexpr size_t kCheckpointPiece = 64ull << 20;  // bytes through pinned staging at a time

std::string unit_name(const char* kind, size_t unit) {
    return absl::StrCat(kind, ".unit.", unit);
}

// Elements [lo, lo + count) of a flat segment saved in equal shards of `saved_shard` elements
// (file r held [r, r + 1) * saved_shard; past `numel` is padding: zero) to `dst` on the device,
// a staging piece at a time, from the files' pages.
absl::Status upload_saved_range(PinnedStaging& staging, const std::vector<SafetensorsFile>& files,
                                const std::string& name, int64_t saved_shard, int64_t numel,
                                int64_t lo, int64_t count, float* dst, cudaStream_t s) {
    const auto step = static_cast<int64_t>(kCheckpointPiece / sizeof(float));
    for (int64_t p0 = 0; p0 < count; p0 += step) {
        const int64_t p1 = std::min(count, p0 + step);
        auto fill = [&](void* host) -> absl::Status {
            auto* out = static_cast<float*>(host);
            std::fill(out, out + (p1 - p0), 0.0f);
            return copy_sharded_f32(files, name, saved_shard, lo + p0, std::min(lo + p1, numel),
                                    out);
        };
        DT_RETURN_IF_ERROR(
            staging.upload(sizeof(float) * static_cast<size_t>(p1 - p0), fill, dst + p0, s));
    }
    return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> FsdpGpuParams::group_sizes() const {
    std::vector<int64_t> g = layout_.unit_numel;
    g.push_back(layout_.replicated_numel);
    return g;
}

// Streamed: each tensor goes from the device to the file through pinned staging pieces, so host
// memory stays at the staging buffers (a whole shard of masters and moments is 12 bytes per
// parameter / world size).
absl::Status FsdpGpuParams::save_shard(const std::string& path) {
    DT_RETURN_IF_ERROR(require_trained("save_shard"));
    DT_RETURN_IF_ERROR(catch_up_embedding());  // the deferred embedding updates, applied
    DT_RETURN_IF_ERROR(synchronize());         // the last step's update is in the masters
    const int64_t n = shard_total_, r = layout_.replicated_numel;
    const float* shard_src[3] = {master_.as<float>(), moments_.as<float>(),
                                 moments_.as<float>() + n};
    const float* rep_src[3] = {rep_master_.as<float>(), rep_moments_.as<float>(),
                               rep_moments_.as<float>() + r};
    std::vector<SafetensorsSpec> specs;
    std::vector<std::pair<const float*, int64_t>> sources;  // device values of each tensor
    for (int k = 0; k < 3; ++k) {
        for (size_t unit = 0; unit < units_.size(); ++unit) {
            const Unit& u = units_[unit];
            if (u.shard == 0) continue;  // the empty embedding unit of a tied model
            specs.push_back({unit_name(kKinds[k], unit), DType::kF32, {u.shard}});
            sources.emplace_back(shard_src[k] + u.shard_begin, u.shard);
        }
        if (r > 0) {
            specs.push_back({absl::StrCat(kKinds[k], ".replicated"), DType::kF32, {r}});
            sources.emplace_back(rep_src[k], r);
        }
    }
    DT_ASSIGN_OR_RETURN(PinnedStaging staging, PinnedStaging::create(kCheckpointPiece, 2));
    const cudaStream_t s = compute();
    return write_safetensors_streamed(
        path, specs,
        {{"format", "deltatune-fsdp-gpu"},
         {"rank", std::to_string(comm_.rank())},
         {"world_size", std::to_string(comm_.world_size())}},
        [&](size_t i, const SafetensorsWrite& write) -> absl::Status {
            const auto [src, numel] = sources[i];
            const int64_t step = static_cast<int64_t>(kCheckpointPiece / sizeof(float));
            for (int64_t at = 0; at < numel; at += step) {
                const size_t bytes =
                    sizeof(float) * static_cast<size_t>(std::min(step, numel - at));
                DT_RETURN_IF_ERROR(staging.download(
                    bytes, src + at, s, [&](const void* host) { return write(host, bytes); }));
            }
            return absl::OkStatus();
        });
}

absl::Status FsdpGpuParams::load_shards(const std::vector<std::string>& rank_files) {
    DT_RETURN_IF_ERROR(require_trained("load_shards"));
    const int64_t world = static_cast<int64_t>(rank_files.size());
    if (world < 1) return absl::InvalidArgumentError("load_shards: no shard files");
    // Every tensor a file holds must be one this model reads: a file of another layout (say,
    // untied embeddings for a tied model) is refused even where the sizes happen to agree.
    std::set<std::string> expected;
    for (const char* kind : kKinds) {
        for (size_t unit = 0; unit < units_.size(); ++unit) {
            if (units_[unit].shard > 0) expected.insert(unit_name(kind, unit));
        }
        if (layout_.replicated_numel > 0) expected.insert(absl::StrCat(kind, ".replicated"));
    }
    std::vector<SafetensorsFile> files;
    for (const auto& path : rank_files) {
        DT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
        for (const std::string& name : f.names()) {
            if (!expected.count(name)) {
                return absl::InvalidArgumentError(absl::StrCat(
                    path, ": holds '", name, "', which this model's parameter layout has not"));
            }
        }
        files.push_back(std::move(f));
    }
    // A saved tensor, checked against the size this model expects of it.
    auto saved = [&](int64_t r, const std::string& name, int64_t numel) -> absl::StatusOr<Tensor> {
        absl::StatusOr<Tensor> got = files[static_cast<size_t>(r)].get(name);
        if (!got.ok()) {
            return absl::InvalidArgumentError(absl::StrCat(rank_files[static_cast<size_t>(r)],
                                                           ": lacks '", name, "' (",
                                                           got.status().message(), ")"));
        }
        const Tensor t = *std::move(got);
        if (t.dtype() != DType::kF32 || t.numel() != numel) {
            return absl::InvalidArgumentError(absl::StrCat(
                rank_files[static_cast<size_t>(r)], ": '", name, "' is ", t.shape_string(), " ",
                dtype_name(t.dtype()), ", this model needs F32 [", numel, "]"));
        }
        return t;
    };
    const int64_t n = shard_total_, rep = layout_.replicated_numel;
    float* shard_dst[3] = {master_.as<float>(), moments_.as<float>(), moments_.as<float>() + n};
    float* rep_dst[3] = {rep_master_.as<float>(), rep_moments_.as<float>(),
                         rep_moments_.as<float>() + rep};
    DT_ASSIGN_OR_RETURN(PinnedStaging staging, PinnedStaging::create(kCheckpointPiece, 2));
    const cudaStream_t s = compute();
    for (int k = 0; k < 3; ++k) {
        for (size_t unit = 0; unit < units_.size(); ++unit) {
            const Unit& u = units_[unit];
            const int64_t numel = layout_.unit_numel[unit];
            if (u.shard == 0) continue;
            const int64_t saved_shard = gpu_unit_shard(numel, world);
            const std::string name = unit_name(kKinds[k], unit);
            for (int64_t r = 0; r < world; ++r) {
                DT_RETURN_IF_ERROR(saved(r, name, saved_shard).status());
            }
            DT_RETURN_IF_ERROR(upload_saved_range(staging, files, name, saved_shard, numel,
                                                  comm_.rank() * u.shard, u.shard,
                                                  shard_dst[k] + u.shard_begin, s));
        }
        if (rep > 0) {  // whole in every file: rank 0's
            const std::string name = absl::StrCat(kKinds[k], ".replicated");
            DT_RETURN_IF_ERROR(saved(0, name, rep).status());
            DT_RETURN_IF_ERROR(
                upload_saved_range(staging, files, name, rep, rep, 0, rep, rep_dst[k], s));
        }
    }
    DT_RETURN_IF_ERROR(staging.finish());
    return refresh_half_from_masters();
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
