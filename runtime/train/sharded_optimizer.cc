#include "runtime/train/sharded_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/safetensors.h"

namespace deltatune {
namespace {

// "model.layers.12.mlp.up_proj.weight" -> "layer.12"; anything else -> "other".
std::string group_of(const std::string& name) {
    constexpr std::string_view kLayers = "model.layers.";
    if (name.rfind(kLayers, 0) != 0) return "other";
    const size_t end = name.find('.', kLayers.size());
    return absl::StrCat("layer.", name.substr(kLayers.size(), end - kLayers.size()));
}

}  // namespace

ShardedOptimizer ShardedOptimizer::create(const ParamSet& params, Communicator* comm) {
    ShardedOptimizer o;
    o.comm_ = comm;
    const int64_t world = comm->world_size();
    std::map<std::string, size_t> index;
    const auto& all = params.all();
    for (size_t i = 0; i < all.size(); ++i) {
        const std::string g = group_of(all[i].name);
        if (!index.count(g)) {
            index[g] = o.groups_.size();
            o.groups_.push_back({g, {}, 0, 0});
        }
        Group& group = o.groups_[index[g]];
        group.members.push_back({i, group.numel, all[i].value.numel()});
        group.numel += all[i].value.numel();
    }
    const int64_t rank = comm->rank();
    for (Group& g : o.groups_) {
        g.shard = (g.numel + world - 1) / world;
        Tensor& m = o.master_.add(g.name, {g.shard}, DType::kF32);
        float* dst = m.data<float>();
        const int64_t begin = rank * g.shard;
        for (const Member& mem : g.members) {
            const float* src = all[mem.param].value.data<float>();
            for (int64_t i = 0; i < mem.numel; ++i) {
                const int64_t flat = mem.offset + i - begin;
                if (flat >= 0 && flat < g.shard) dst[flat] = src[i];
            }
        }
    }
    o.adam_ = make_adamw_state(o.master_);
    for (const Group& g : o.groups_) o.acc_.emplace_back(static_cast<size_t>(g.shard * world), 0.0);
    return o;
}

std::vector<int64_t> ShardedOptimizer::group_sizes() const {
    std::vector<int64_t> out;
    for (const Group& g : groups_) out.push_back(g.numel);
    return out;
}

void ShardedOptimizer::accumulate(const ParamSet& grads) {
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        double* acc = acc_[gi].data();
        for (const Member& mem : groups_[gi].members) {
            const float* src = grads.all()[mem.param].value.data<float>();
            for (int64_t i = 0; i < mem.numel; ++i) acc[mem.offset + i] += src[i];
        }
    }
}

absl::StatusOr<double> ShardedOptimizer::step(ParamSet& params, const AdamWHyper& hyper,
                                              double max_grad_norm) {
    ParamSet shard_grads = master_.zeros_like();
    double sq = 0;
    const int64_t rank = comm_->rank();
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        std::vector<double>& acc = acc_[gi];
        // The fp64 sum over ranks, then this rank's slice (the CPU engine's reduce-scatter).
        DT_RETURN_IF_ERROR(comm_->all_reduce_sum(acc.data(), acc.size()));
        float* out = shard_grads.all()[gi].value.data<float>();
        for (int64_t i = 0; i < g.shard; ++i) {
            out[i] = static_cast<float>(acc[static_cast<size_t>(rank * g.shard + i)]);
            sq += static_cast<double>(out[i]) * out[i];
        }
        std::fill(acc.begin(), acc.end(), 0.0);
    }
    DT_RETURN_IF_ERROR(comm_->all_reduce_sum(&sq, 1));
    const double norm = std::sqrt(sq);
    if (max_grad_norm > 0 && norm > max_grad_norm) {
        const float s = static_cast<float>(max_grad_norm / (norm + 1e-6));  // clip_grad_norm_
        for (auto& p : shard_grads.all()) {
            float* d = p.value.data<float>();
            for (int64_t i = 0; i < p.value.numel(); ++i) d[i] *= s;
        }
    }
    adamw_update(master_, shard_grads, adam_, hyper);
    DT_RETURN_IF_ERROR(gather_into(params));
    return norm;
}

absl::Status ShardedOptimizer::gather_into(ParamSet& params) {
    const int64_t world = comm_->world_size();
    std::vector<float> flat;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        flat.resize(static_cast<size_t>(g.shard * world));
        DT_RETURN_IF_ERROR(comm_->all_gather(master_.all()[gi].value.data<float>(),
                                             static_cast<size_t>(g.shard), flat.data()));
        for (const Member& mem : g.members) {
            float* dst = params.all()[mem.param].value.data<float>();
            std::memcpy(dst, flat.data() + mem.offset, static_cast<size_t>(mem.numel) * 4);
        }
    }
    return absl::OkStatus();
}

absl::Status ShardedOptimizer::save_shard(const std::string& path) const {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        tensors.emplace_back("master." + groups_[gi].name, master_.all()[gi].value);
        tensors.emplace_back("m." + groups_[gi].name, adam_.m.all()[gi].value);
        tensors.emplace_back("v." + groups_[gi].name, adam_.v.all()[gi].value);
    }
    return write_safetensors(path, tensors,
                             {{"rank", std::to_string(comm_->rank())},
                              {"world_size", std::to_string(comm_->world_size())}});
}

absl::Status ShardedOptimizer::load(const std::vector<std::string>& rank_files, ParamSet& params) {
    const int world = static_cast<int>(rank_files.size());
    if (world < 1) return absl::InvalidArgumentError("load: no shard files");
    std::vector<SafetensorsFile> files;
    for (const std::string& path : rank_files) {
        DT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
        files.push_back(std::move(f));
    }
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        const int64_t saved_shard = (g.numel + world - 1) / world;
        const int64_t my_begin = comm_->rank() * g.shard;
        Tensor* targets[3] = {&master_.all()[gi].value, &adam_.m.all()[gi].value,
                              &adam_.v.all()[gi].value};
        const char* prefixes[3] = {"master.", "m.", "v."};
        for (int k = 0; k < 3; ++k) {
            float* dst = targets[k]->data<float>();
            std::memset(dst, 0, static_cast<size_t>(g.shard) * 4);
            for (int r = 0; r < world; ++r) {
                const std::string name = prefixes[k] + g.name;
                DT_ASSIGN_OR_RETURN(Tensor t, files[static_cast<size_t>(r)].get(name));
                if (t.dtype() != DType::kF32 || t.numel() != saved_shard) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        rank_files[static_cast<size_t>(r)], ": '", name, "' is ", t.shape_string(),
                        " ", dtype_name(t.dtype()), ", this model needs F32 [", saved_shard, "]"));
                }
                const float* src = static_cast<const float*>(t.raw_data());
                // Saved rank r holds flat elements [r * saved_shard, (r + 1) * saved_shard).
                for (int64_t i = 0; i < saved_shard; ++i) {
                    const int64_t flat = r * saved_shard + i - my_begin;
                    if (flat >= 0 && flat < g.shard && r * saved_shard + i < g.numel) {
                        dst[flat] = src[i];
                    }
                }
            }
        }
    }
    return gather_into(params);
}

}  // namespace deltatune
