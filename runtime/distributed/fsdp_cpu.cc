#include "runtime/distributed/fsdp_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/safetensors.h"

namespace deltatune {

namespace {

// Elements summed or gathered at a time: bounds the collectives' scratch whatever a unit's size.
constexpr int64_t kPiece = 1 << 18;

}  // namespace

FsdpCpuParams::Layout FsdpCpuParams::layout(const ParamSet& params, int64_t num_layers) {
    Layout l;
    const bool tied = !params.contains("lm_head.weight");
    l.names.push_back("embed");
    for (int64_t i = 0; i < num_layers; ++i) l.names.push_back(absl::StrCat("layer.", i));
    l.names.push_back("head");
    l.sizes.assign(l.names.size(), 0);
    for (const NamedParam& p : params.all()) {
        const auto u = static_cast<size_t>(cpu_param_unit(p.name, num_layers, tied));
        l.unit.push_back(u);
        l.offset.push_back(l.sizes[u]);
        l.sizes[u] += p.value.numel();
    }
    return l;
}

FsdpCpuParams::FsdpCpuParams(ParamSet& values, ParamSet& grads, Communicator& comm,
                             int64_t num_layers)
    : values_(values), grads_(grads), comm_(comm) {
    const Layout l = layout(values, num_layers);
    const int64_t world = comm.world_size();
    units_.resize(l.names.size());
    for (size_t u = 0; u < units_.size(); ++u) {
        units_[u].name = l.names[u];
        units_[u].numel = l.sizes[u];
        units_[u].shard = shard_size(l.sizes[u], world);
    }
    for (size_t i = 0; i < values.all().size(); ++i) {
        units_[l.unit[i]].members.push_back({i, l.offset[i], values.all()[i].value.numel()});
    }
    unit_of_param_ = l.unit;
    for (Unit& u : units_) {
        u.m.assign(static_cast<size_t>(u.shard), 0.0f);
        u.v.assign(static_cast<size_t>(u.shard), 0.0f);
        if (world == 1) continue;  // the full sets are the shard
        u.master.assign(static_cast<size_t>(u.shard), 0.0f);
        u.grad.assign(static_cast<size_t>(u.shard), 0.0f);
    }
}

absl::StatusOr<std::unique_ptr<FsdpCpuParams>> FsdpCpuParams::create(HfModel& model,
                                                                     ParamSet& grads,
                                                                     Communicator& comm) {
    std::unique_ptr<FsdpCpuParams> p(
        new FsdpCpuParams(model.params, grads, comm, model.config.num_layers));
    if (comm.world_size() == 1) {
        if (!model.materialized) DT_RETURN_IF_ERROR(materialize_weights(model));
        return p;
    }
    if (!model.materialized) {
        DT_RETURN_IF_ERROR(p->load_weights(*model.weights));
    } else {
        DT_RETURN_IF_ERROR(p->take_shard_from_values());
    }
    return p;
}

template <typename Fn>
void FsdpCpuParams::for_each_member_piece(const Unit& u, int64_t lo, int64_t hi, Fn&& fn) {
    for (const Member& mem : u.members) {
        const int64_t a = std::max(lo, mem.offset), b = std::min(hi, mem.offset + mem.numel);
        if (a < b) fn(mem, a - mem.offset, b - a, a);
    }
}

template <typename Fn>
void FsdpCpuParams::for_each_shard_range(Unit& u, int64_t lo, int64_t hi, Fn&& fn) {
    if (comm_.world_size() > 1) {
        if (lo < hi) fn(u.master.data() + lo, u.grad.data() + lo, hi - lo, lo);
        return;
    }
    // World size 1: the shard is the whole unit, in the member tensors.
    for_each_member_piece(u, lo, hi, [&](const Member& m, int64_t first, int64_t n, int64_t flat) {
        fn(value(m.param) + first, grad(m.param) + first, n, flat);
    });
}

// This rank's slice of the unit's flat range: [rank * shard, + shard), clipped to the unit.
absl::Status FsdpCpuParams::load_weights(const CheckpointWeights& weights) {
    for (Unit& u : units_) {
        const int64_t lo = comm_.rank() * u.shard;
        absl::Status s;
        for_each_member_piece(
            u, lo, lo + u.shard, [&](const Member& m, int64_t first, int64_t n, int64_t flat) {
                if (s.ok()) {
                    s = weights.copy_f32(m.param, first, first + n, u.master.data() + (flat - lo));
                }
            });
        DT_RETURN_IF_ERROR(s);
    }
    return absl::OkStatus();
}

absl::Status FsdpCpuParams::take_shard_from_values() {
    for (Unit& u : units_) {
        const int64_t lo = comm_.rank() * u.shard;
        for_each_member_piece(u, lo, lo + u.shard,
                              [&](const Member& m, int64_t first, int64_t n, int64_t flat) {
                                  std::memcpy(u.master.data() + (flat - lo), value(m.param) + first,
                                              static_cast<size_t>(n) * sizeof(float));
                              });
        drop(u, /*grads_too=*/false);
    }
    return absl::OkStatus();
}

absl::Status FsdpCpuParams::gather(Unit& u) {
    const int64_t world = comm_.world_size();
    std::vector<float> full;
    for (int64_t k0 = 0; k0 < u.shard; k0 += kPiece) {
        const int64_t n = std::min(kPiece, u.shard - k0);
        full.resize(static_cast<size_t>(n * world));
        DT_RETURN_IF_ERROR(
            comm_.all_gather(u.master.data() + k0, static_cast<size_t>(n), full.data()));
        for (int64_t r = 0; r < world; ++r) {
            const int64_t from = r * u.shard + k0;
            for_each_member_piece(
                u, from, from + n, [&](const Member& m, int64_t first, int64_t cnt, int64_t flat) {
                    std::memcpy(value(m.param) + first, full.data() + r * n + (flat - from),
                                static_cast<size_t>(cnt) * sizeof(float));
                });
        }
    }
    u.present = true;
    return absl::OkStatus();
}

void FsdpCpuParams::drop(Unit& u, bool grads_too) {
    for (const Member& m : u.members) {
        discard_pages(value(m.param), static_cast<size_t>(m.numel) * sizeof(float));
        if (grads_too) discard_pages(grad(m.param), static_cast<size_t>(m.numel) * sizeof(float));
    }
    u.present = false;
}

absl::Status FsdpCpuParams::acquire(int unit, Phase phase) {
    Unit& u = units_[static_cast<size_t>(unit)];
    if (u.numel == 0) return absl::OkStatus();
    if (comm_.world_size() > 1 && !u.present) DT_RETURN_IF_ERROR(gather(u));
    if (phase == Phase::kBackward) {
        for (const Member& m : u.members) grads_.all()[m.param].value.fill_zero();
    }
    return absl::OkStatus();
}

absl::Status FsdpCpuParams::release(int unit, Phase phase) {
    Unit& u = units_[static_cast<size_t>(unit)];
    if (u.numel == 0) return absl::OkStatus();
    if (phase == Phase::kBackward) DT_RETURN_IF_ERROR(reduce_grads(u));
    if (comm_.world_size() > 1) drop(u, /*grads_too=*/phase == Phase::kBackward);
    return absl::OkStatus();
}

// Sums the unit's gradients over the ranks (fp64, a piece at a time) into this rank's shard:
// rounded to fp32 now, or added to the fp64 accumulators while the step runs several
// micro-batches (rounded after the last).
absl::Status FsdpCpuParams::reduce_grads(Unit& u) {
    const int64_t world = comm_.world_size();
    if (world == 1 && !accumulating_) return absl::OkStatus();  // the sum is the gradient itself
    const int64_t lo = comm_.rank() * u.shard, padded = u.shard * world;
    if (accumulating_ && u.acc.empty()) u.acc.assign(static_cast<size_t>(u.shard), 0.0);
    std::vector<double> buf;
    for (int64_t c0 = 0; c0 < padded; c0 += kPiece) {
        const int64_t c1 = std::min(padded, c0 + kPiece);
        buf.assign(static_cast<size_t>(c1 - c0), 0.0);
        for_each_member_piece(u, c0, c1,
                              [&](const Member& m, int64_t first, int64_t n, int64_t flat) {
                                  const float* src = grad(m.param) + first;
                                  for (int64_t i = 0; i < n; ++i)
                                      buf[static_cast<size_t>(flat - c0 + i)] = src[i];
                              });
        if (world > 1) DT_RETURN_IF_ERROR(comm_.all_reduce_sum(buf.data(), buf.size()));
        const int64_t a = std::max(c0, lo), b = std::min(c1, lo + u.shard);
        if (a >= b) continue;
        if (accumulating_) {
            for (int64_t f = a; f < b; ++f) {
                u.acc[static_cast<size_t>(f - lo)] += buf[static_cast<size_t>(f - c0)];
            }
            if (!last_) continue;
        }
        for_each_shard_range(u, a - lo, b - lo, [&](float*, float* g, int64_t n, int64_t flat) {
            for (int64_t i = 0; i < n; ++i) {
                const double sum = accumulating_ ? u.acc[static_cast<size_t>(flat + i)]
                                                 : buf[static_cast<size_t>(flat + lo - c0 + i)];
                g[i] = static_cast<float>(sum);
            }
        });
    }
    if (accumulating_ && last_) std::vector<double>().swap(u.acc);
    return absl::OkStatus();
}

void FsdpCpuParams::begin_micro_batch(bool last) {
    if (!in_step_) accumulating_ = !last;  // the step's first micro-batch
    in_step_ = true;
    last_ = last;
}

absl::Status FsdpCpuParams::join_without_batch() {
    for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
        DT_RETURN_IF_ERROR(acquire(u, Phase::kForward));
        DT_RETURN_IF_ERROR(release(u, Phase::kForward));
    }
    for (int u = static_cast<int>(units_.size()) - 1; u >= 0; --u) {
        DT_RETURN_IF_ERROR(acquire(u, Phase::kBackward));
        DT_RETURN_IF_ERROR(release(u, Phase::kBackward));
    }
    return absl::OkStatus();
}

int64_t FsdpCpuParams::begin_update() {
    in_step_ = false;
    accumulating_ = false;
    return ++adam_step_;
}

std::vector<CpuUpdatePiece> FsdpCpuParams::shard_pieces() {
    std::vector<CpuUpdatePiece> pieces;
    for (Unit& u : units_) {
        for_each_shard_range(u, 0, u.shard, [&](float* master, float* g, int64_t n, int64_t flat) {
            pieces.push_back({master, g, u.m.data() + flat, u.v.data() + flat, n});
        });
    }
    return pieces;
}

void FsdpCpuParams::end_update() {
    if (comm_.world_size() == 1) return;
    for (Unit& u : units_) {
        if (u.present) drop(u, /*grads_too=*/false);  // now stale
    }
}

absl::Status FsdpCpuParams::gather_all() {
    if (comm_.world_size() == 1) return absl::OkStatus();
    for (Unit& u : units_) {
        if (u.numel > 0 && !u.present) DT_RETURN_IF_ERROR(gather(u));
    }
    return absl::OkStatus();
}

ParamBytes FsdpCpuParams::param_bytes() {
    return [this](size_t i, const SafetensorsWrite& write) -> absl::Status {
        const auto u = static_cast<int>(unit_of_param_[i]);
        if (exported_unit_ != u) {
            if (exported_unit_ >= 0) DT_RETURN_IF_ERROR(release(exported_unit_, Phase::kForward));
            DT_RETURN_IF_ERROR(acquire(u, Phase::kForward));
            exported_unit_ = u;
        }
        DT_RETURN_IF_ERROR(param_bytes_of(values_)(i, write));
        if (i + 1 == values_.all().size()) {
            exported_unit_ = -1;
            return release(u, Phase::kForward);
        }
        return absl::OkStatus();
    };
}

std::vector<int64_t> FsdpCpuParams::group_sizes() const {
    std::vector<int64_t> out;
    for (const Unit& u : units_) out.push_back(u.numel);
    return out;
}

absl::Status FsdpCpuParams::save_shard(const std::string& path) {
    std::vector<SafetensorsSpec> specs;
    std::vector<Unit*> saved;  // a tied model's empty embedding unit is not saved
    for (Unit& u : units_) {
        if (u.numel == 0) continue;
        saved.push_back(&u);
        for (const char* kind : {"master.", "m.", "v."}) {
            specs.push_back({kind + u.name, DType::kF32, {u.shard}});
        }
    }
    const std::map<std::string, std::string> meta = {
        {"rank", std::to_string(comm_.rank())}, {"world_size", std::to_string(comm_.world_size())}};
    return write_safetensors_streamed(
        path, specs, meta, [&](size_t i, const SafetensorsWrite& write) -> absl::Status {
            Unit& u = *saved[i / 3];
            const size_t bytes = static_cast<size_t>(u.shard) * sizeof(float);
            if (i % 3 == 1) return write(u.m.data(), bytes);
            if (i % 3 == 2) return write(u.v.data(), bytes);
            absl::Status s;
            for_each_shard_range(u, 0, u.shard, [&](float* master, float*, int64_t n, int64_t) {
                if (s.ok()) s = write(master, static_cast<size_t>(n) * sizeof(float));
            });
            return s;
        });
}

absl::Status FsdpCpuParams::load(const std::vector<std::string>& rank_files) {
    const auto world = static_cast<int64_t>(rank_files.size());
    if (world < 1) return absl::InvalidArgumentError("load: no shard files");
    std::vector<SafetensorsFile> files;
    for (const std::string& path : rank_files) {
        DT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
        files.push_back(std::move(f));
    }
    for (Unit& u : units_) {
        if (u.numel == 0) continue;
        const int64_t saved_shard = shard_size(u.numel, world);
        for (const char* kind : {"master.", "m.", "v."}) {
            const std::string name = kind + u.name;
            for (const SafetensorsFile& f : files) {
                const SafetensorsEntry* e = f.entry(name);
                if (!e || e->dtype != DType::kF32 ||
                    e->end - e->begin != static_cast<size_t>(saved_shard) * sizeof(float)) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        f.path(), ": no '", name, "' of F32 [", saved_shard, "] (this model's)"));
                }
            }
        }
        // This rank's slice; saved rank r held [r, r + 1) * saved_shard. Padding stays zero.
        const int64_t lo = comm_.rank() * u.shard, end = std::min(lo + u.shard, u.numel);
        if (lo >= end) continue;
        absl::Status s;
        for_each_shard_range(u, 0, end - lo, [&](float* master, float*, int64_t n, int64_t flat) {
            if (s.ok()) {
                s = copy_sharded_f32(files, "master." + u.name, saved_shard, lo + flat,
                                     lo + flat + n, master);
            }
        });
        DT_RETURN_IF_ERROR(s);
        DT_RETURN_IF_ERROR(
            copy_sharded_f32(files, "m." + u.name, saved_shard, lo, end, u.m.data()));
        DT_RETURN_IF_ERROR(
            copy_sharded_f32(files, "v." + u.name, saved_shard, lo, end, u.v.data()));
        if (u.present && comm_.world_size() > 1) drop(u, /*grads_too=*/false);
    }
    return absl::OkStatus();
}

}  // namespace deltatune
