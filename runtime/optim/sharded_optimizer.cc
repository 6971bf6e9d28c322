#include "runtime/optim/sharded_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/optim/cpu_update.h"

namespace deltatune {
namespace {

// "model.layers.12.mlp.up_proj.weight" -> "layer.12"; anything else -> "other".
std::string group_of(const std::string& name) {
    constexpr std::string_view kLayers = "model.layers.";
    if (name.rfind(kLayers, 0) != 0) return "other";
    const size_t end = name.find('.', kLayers.size());
    return absl::StrCat("layer.", name.substr(kLayers.size(), end - kLayers.size()));
}

// Elements summed or gathered at a time: bounds the step's scratch whatever a group's size.
constexpr int64_t kPiece = 1 << 20;

}  // namespace

ShardedOptimizer::FlatLayout ShardedOptimizer::flat_layout(const ParamSet& params) {
    FlatLayout l;
    std::map<std::string, size_t> index;
    for (const NamedParam& p : params.all()) {
        const std::string g = group_of(p.name);
        if (!index.count(g)) {
            index[g] = l.names.size();
            l.names.push_back(g);
            l.sizes.push_back(0);
        }
        const size_t gi = index[g];
        l.group.push_back(gi);
        l.offset.push_back(l.sizes[gi]);
        l.sizes[gi] += p.value.numel();
    }
    return l;
}

ShardedOptimizer ShardedOptimizer::create(ParamSet& params, Communicator* comm) {
    ShardedOptimizer o;
    o.comm_ = comm;
    o.params_ = &params;
    const int64_t world = comm->world_size();
    const FlatLayout l = flat_layout(params);
    for (size_t gi = 0; gi < l.names.size(); ++gi) o.groups_.push_back({l.names[gi], {}, 0, 0});
    for (size_t i = 0; i < params.all().size(); ++i) {
        Group& g = o.groups_[l.group[i]];
        g.members.push_back({i, l.offset[i], params.all()[i].value.numel()});
        g.numel += params.all()[i].value.numel();
    }
    ParamSet shards;  // names and shard sizes of the moments
    for (Group& g : o.groups_) {
        g.shard = group_shard(g.numel, world);
        shards.add(g.name, {g.shard}, DType::kF32, /*zero_fill=*/false);
    }
    o.adam_ = make_adamw_state(shards);
    return o;
}

template <typename Fn>
void ShardedOptimizer::for_each_piece(const Group& g, int64_t lo, int64_t hi, Fn&& fn) {
    for (const Member& mem : g.members) {
        const int64_t a = std::max(lo, mem.offset), b = std::min(hi, mem.offset + mem.numel);
        if (a < b) fn(mem, a - mem.offset, b - a, a);
    }
}

ShardedStateIo ShardedOptimizer::state_io() {
    ShardedStateIo io;
    io.group_sizes = group_sizes();
    io.adam_step = adam_step();
    io.save_shard = [this](const std::string& path) { return save_shard(path); };
    io.load = [this](const std::vector<std::string>& files, int64_t adam_step) {
        DT_RETURN_IF_ERROR(load(files));
        set_adam_step(adam_step);
        return absl::OkStatus();
    };
    return io;
}

std::vector<int64_t> ShardedOptimizer::group_sizes() const {
    std::vector<int64_t> out;
    for (const Group& g : groups_) out.push_back(g.numel);
    return out;
}

void ShardedOptimizer::accumulate(const ParamSet& grads) {
    if (acc_.empty()) {
        for (const Group& g : groups_) {
            acc_.emplace_back(static_cast<size_t>(g.shard * comm_->world_size()), 0.0);
        }
    }
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        double* acc = acc_[gi].data();
        for (const Member& mem : groups_[gi].members) {
            const float* src = grads.all()[mem.param].value.data<float>();
            for (int64_t i = 0; i < mem.numel; ++i) acc[mem.offset + i] += src[i];
        }
    }
}

// Sums group gi's gradients over the ranks in pieces of kPiece elements (fp64: the accumulators
// plus `last`) and keeps this rank's slice, rounded to fp32, in `last` or `scratch`. Returns the
// slice's squared sum, in flat order.
absl::StatusOr<double> ShardedOptimizer::reduce_group(size_t gi, ParamSet* last,
                                                      std::vector<float>& scratch) {
    const Group& g = groups_[gi];
    const int64_t padded = g.shard * comm_->world_size();
    const int64_t lo = comm_->rank() * g.shard, hi = lo + g.shard;
    if (!last) scratch.assign(static_cast<size_t>(g.shard), 0.0f);
    std::vector<double> buf;
    double sq = 0;
    for (int64_t c0 = 0; c0 < padded; c0 += kPiece) {
        const int64_t c1 = std::min(padded, c0 + kPiece);
        buf.assign(static_cast<size_t>(c1 - c0), 0.0);
        if (!acc_.empty()) std::copy(acc_[gi].begin() + c0, acc_[gi].begin() + c1, buf.begin());
        if (last) {
            for_each_piece(g, c0, c1, [&](const Member& m, int64_t first, int64_t n, int64_t flat) {
                const float* src = last->all()[m.param].value.data<float>() + first;
                for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(flat - c0 + i)] += src[i];
            });
        }
        DT_RETURN_IF_ERROR(comm_->all_reduce_sum(buf.data(), buf.size()));
        const int64_t a = std::max(c0, lo), b = std::min(c1, hi);
        if (a >= b) continue;
        if (!last) {
            for (int64_t f = a; f < b; ++f) {
                const auto v = static_cast<float>(buf[static_cast<size_t>(f - c0)]);
                scratch[static_cast<size_t>(f - lo)] = v;
                sq += static_cast<double>(v) * v;
            }
            continue;
        }
        for_each_piece(g, a, b, [&](const Member& m, int64_t first, int64_t n, int64_t flat) {
            float* dst = last->all()[m.param].value.data<float>() + first;
            for (int64_t i = 0; i < n; ++i) {
                dst[i] = static_cast<float>(buf[static_cast<size_t>(flat - c0 + i)]);
                sq += static_cast<double>(dst[i]) * dst[i];
            }
        });
    }
    return sq;
}

absl::StatusOr<double> ShardedOptimizer::step(ParamSet* last, const AdamWHyper& hyper,
                                              double max_grad_norm) {
    std::vector<std::vector<float>> scratch(groups_.size());
    double sq = 0;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        DT_ASSIGN_OR_RETURN(const double group_sq, reduce_group(gi, last, scratch[gi]));
        sq += group_sq;
    }
    acc_.clear();
    DT_RETURN_IF_ERROR(comm_->all_reduce_sum(&sq, 1));
    const double norm = std::sqrt(sq);
    ++adam_.step;
    std::vector<CpuUpdatePiece> pieces;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        const int64_t lo = comm_->rank() * g.shard;
        float* m = adam_.m.all()[gi].value.data<float>();
        float* v = adam_.v.all()[gi].value.data<float>();
        for_each_piece(g, lo, lo + g.shard,
                       [&](const Member& mem, int64_t first, int64_t n, int64_t flat) {
                           float* grad = last ? last->all()[mem.param].value.data<float>() + first
                                              : scratch[gi].data() + (flat - lo);
                           pieces.push_back({params_->all()[mem.param].value.data<float>() + first,
                                             grad, m + (flat - lo), v + (flat - lo), n});
                       });
    }
    clip_and_adamw(pieces, grad_clip(norm, max_grad_norm), hyper, adam_.step);
    DT_RETURN_IF_ERROR(gather_params());
    return norm;
}

// Every rank's updated slice to every rank, a piece of each rank's shard at a time.
absl::Status ShardedOptimizer::gather_params() {
    const int64_t world = comm_->world_size();
    if (world == 1) return absl::OkStatus();  // updated in place: nothing to send
    std::vector<float> mine, full;
    for (const Group& g : groups_) {
        for (int64_t k0 = 0; k0 < g.shard; k0 += kPiece) {
            const int64_t n = std::min(kPiece, g.shard - k0);
            const int64_t at = comm_->rank() * g.shard + k0;
            mine.assign(static_cast<size_t>(n), 0.0f);
            for_each_piece(
                g, at, at + n, [&](const Member& m, int64_t first, int64_t cnt, int64_t flat) {
                    const float* src = params_->all()[m.param].value.data<float>() + first;
                    std::copy(src, src + cnt, mine.begin() + (flat - at));
                });
            full.resize(static_cast<size_t>(n * world));
            DT_RETURN_IF_ERROR(comm_->all_gather(mine.data(), static_cast<size_t>(n), full.data()));
            for (int64_t r = 0; r < world; ++r) {
                const int64_t from = r * g.shard + k0;
                for_each_piece(g, from, from + n,
                               [&](const Member& m, int64_t first, int64_t cnt, int64_t flat) {
                                   const float* src = full.data() + r * n + (flat - from);
                                   std::copy(src, src + cnt,
                                             params_->all()[m.param].value.data<float>() + first);
                               });
            }
        }
    }
    return absl::OkStatus();
}

absl::Status ShardedOptimizer::save_shard(const std::string& path) const {
    std::vector<SafetensorsSpec> specs;
    for (const Group& g : groups_) {
        for (const char* kind : {"master.", "m.", "v."}) {
            specs.push_back({kind + g.name, DType::kF32, {g.shard}});
        }
    }
    const std::map<std::string, std::string> meta = {
        {"rank", std::to_string(comm_->rank())},
        {"world_size", std::to_string(comm_->world_size())}};
    return write_safetensors_streamed(
        path, specs, meta, [&](size_t i, const SafetensorsWrite& write) {
            const size_t gi = i / 3;
            const Group& g = groups_[gi];
            if (i % 3 != 0) {  // a moment: this rank's shard as it is
                const Tensor& t = (i % 3 == 1 ? adam_.m : adam_.v).all()[gi].value;
                return write(t.raw_data(), t.nbytes());
            }
            // The master: this rank's slice of the parameters, zeros past the group's end.
            const int64_t lo = comm_->rank() * g.shard, hi = lo + g.shard;
            absl::Status s;
            for_each_piece(g, lo, hi, [&](const Member& m, int64_t first, int64_t n, int64_t) {
                const float* src = params_->all()[m.param].value.data<float>() + first;
                if (s.ok()) s = write(src, static_cast<size_t>(n) * sizeof(float));
            });
            DT_RETURN_IF_ERROR(s);
            const std::vector<float> zeros(
                static_cast<size_t>(hi - std::max(lo, std::min(hi, g.numel))));
            return write(zeros.data(), zeros.size() * sizeof(float));
        });
}

absl::Status ShardedOptimizer::load(const std::vector<std::string>& rank_files) {
    const int world = static_cast<int>(rank_files.size());
    if (world < 1) return absl::InvalidArgumentError("load: no shard files");
    std::vector<SafetensorsFile> files;
    for (const std::string& path : rank_files) {
        DT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
        files.push_back(std::move(f));
    }
    std::vector<float> master;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
        const Group& g = groups_[gi];
        const int64_t saved_shard = group_shard(g.numel, world);
        const int64_t my_begin = comm_->rank() * g.shard;
        master.assign(static_cast<size_t>(g.shard), 0.0f);
        float* targets[3] = {master.data(), adam_.m.all()[gi].value.data<float>(),
                             adam_.v.all()[gi].value.data<float>()};
        const char* prefixes[3] = {"master.", "m.", "v."};
        for (int k = 0; k < 3; ++k) {
            float* dst = targets[k];
            std::memset(dst, 0, static_cast<size_t>(g.shard) * 4);
            for (int r = 0; r < world; ++r) {
                const std::string name = prefixes[k] + g.name;
                DT_ASSIGN_OR_RETURN(Tensor t, files[static_cast<size_t>(r)].get(name));
                if (t.dtype() != DType::kF32 || t.numel() != saved_shard) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        rank_files[static_cast<size_t>(r)], ": '", name, "' is ", t.shape_string(),
                        " ", dtype_name(t.dtype()), ", this model needs F32 [", saved_shard, "]"));
                }
            }
            // This rank's slice; saved rank r held [r, r + 1) * saved_shard. Padding stays zero.
            const int64_t end = std::min(my_begin + g.shard, g.numel);
            if (my_begin < end) {
                DT_RETURN_IF_ERROR(
                    copy_sharded_f32(files, prefixes[k] + g.name, saved_shard, my_begin, end, dst));
            }
        }
        for_each_piece(g, my_begin, my_begin + g.shard,
                       [&](const Member& m, int64_t first, int64_t n, int64_t flat) {
                           std::copy(master.begin() + (flat - my_begin),
                                     master.begin() + (flat - my_begin + n),
                                     params_->all()[m.param].value.data<float>() + first);
                       });
    }
    return gather_params();
}

}  // namespace deltatune
