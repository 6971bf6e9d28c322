// FsdpGpuParams' sharded checkpoint files (see fsdp_gpu.h).
#include "runtime/dist/fsdp_gpu.h"

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

std::string unit_name(const char* kind, size_t unit) {
    return absl::StrCat(kind, ".unit.", unit);
}

}  // namespace

std::vector<int64_t> FsdpGpuParams::group_sizes() const {
    std::vector<int64_t> g = layout_.unit_numel;
    g.push_back(layout_.replicated_numel);
    return g;
}

absl::Status FsdpGpuParams::save_shard(const std::string& path) {
    DT_RETURN_IF_ERROR(require_trained("save_shard"));
    DT_RETURN_IF_ERROR(catch_up_embedding());  // the deferred embedding updates, applied
    DT_RETURN_IF_ERROR(synchronize());         // the last step's update is in the masters
    const int64_t n = shard_total_, r = layout_.replicated_numel;
    const float* shard_src[3] = {master_.as<float>(), moments_.as<float>(),
                                 moments_.as<float>() + n};
    const float* rep_src[3] = {rep_master_.as<float>(), rep_moments_.as<float>(),
                               rep_moments_.as<float>() + r};
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (int k = 0; k < 3; ++k) {
        for (size_t unit = 0; unit < units_.size(); ++unit) {
            const Unit& u = units_[unit];
            if (u.shard == 0) continue;  // the empty embedding unit of a tied model
            Tensor t = Tensor::cpu({u.shard});
            DT_CUDA_RETURN_IF_ERROR(cudaMemcpy(t.data<float>(), shard_src[k] + u.shard_begin,
                                               sizeof(float) * u.shard, cudaMemcpyDeviceToHost));
            tensors.emplace_back(unit_name(kKinds[k], unit), std::move(t));
        }
        if (r > 0) {
            Tensor t = Tensor::cpu({r});
            DT_CUDA_RETURN_IF_ERROR(
                cudaMemcpy(t.data<float>(), rep_src[k], sizeof(float) * r, cudaMemcpyDeviceToHost));
            tensors.emplace_back(absl::StrCat(kKinds[k], ".replicated"), std::move(t));
        }
    }
    return write_safetensors(path, tensors,
                             {{"format", "deltatune-fsdp-gpu"},
                              {"rank", std::to_string(comm_.rank())},
                              {"world_size", std::to_string(comm_.world_size())}});
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
    std::vector<float> host;
    for (int k = 0; k < 3; ++k) {
        for (size_t unit = 0; unit < units_.size(); ++unit) {
            const Unit& u = units_[unit];
            const int64_t numel = layout_.unit_numel[unit];
            if (u.shard == 0) continue;
            const int64_t quantum = world * kGpuParamAlign;
            const int64_t saved_shard = (numel + quantum - 1) / quantum * quantum / world;
            // This rank's slice [lo, hi) of the unit; saved rank r held [r, r + 1) * saved_shard.
            const int64_t lo = comm_.rank() * u.shard, hi = std::min(lo + u.shard, numel);
            host.assign(static_cast<size_t>(u.shard), 0.0f);  // padding stays zero
            for (int64_t r = lo / saved_shard; r < world && r * saved_shard < hi; ++r) {
                DT_ASSIGN_OR_RETURN(Tensor t, saved(r, unit_name(kKinds[k], unit), saved_shard));
                const int64_t a = std::max(lo, r * saved_shard);
                const int64_t b = std::min(hi, (r + 1) * saved_shard);
                std::memcpy(host.data() + (a - lo), t.data<float>() + (a - r * saved_shard),
                            sizeof(float) * static_cast<size_t>(b - a));
            }
            DT_CUDA_RETURN_IF_ERROR(cudaMemcpy(shard_dst[k] + u.shard_begin, host.data(),
                                               sizeof(float) * u.shard, cudaMemcpyHostToDevice));
        }
        if (rep > 0) {
            DT_ASSIGN_OR_RETURN(Tensor t, saved(0, absl::StrCat(kKinds[k], ".replicated"), rep));
            DT_CUDA_RETURN_IF_ERROR(cudaMemcpy(rep_dst[k], t.data<float>(), sizeof(float) * rep,
                                               cudaMemcpyHostToDevice));
        }
    }
    return refresh_half_from_masters();
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
