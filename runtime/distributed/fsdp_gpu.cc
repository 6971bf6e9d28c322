#include "runtime/distributed/fsdp_gpu.h"

#if DELTATUNE_HAVE_CUDA
#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "kernels/optim/shard_reduce.h"
#include "kernels/tensor/cast.h"
#include "kernels/tensor/init_fill.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/distributed/nccl_host_communicator.h"
#include "runtime/model/qwen35_params.h"

namespace deltatune {

namespace {
using bf16 = __nv_bfloat16;
}  // namespace

absl::StatusOr<std::unique_ptr<FsdpGpuParams>> FsdpGpuParams::create(DeviceContext& dev,
                                                                     NcclCommunicator& comm,
                                                                     const Qwen35Config& config,
                                                                     bool frozen) {
    if (dev.device().is_cpu()) {
        return absl::FailedPreconditionError("FsdpGpuParams needs a CUDA device context");
    }
    std::unique_ptr<FsdpGpuParams> f(new FsdpGpuParams(dev, comm));
    f->config_ = config;
    f->frozen_ = frozen;
    ParamSet names = make_qwen35_params(config, config.tie_word_embeddings, /*zero_fill=*/false);
    for (const auto& p : names.all()) f->names_.push_back(p.name);
    f->layout_ = make_gpu_param_layout(config, names, /*replicate_fp32_read=*/true);
    const int64_t world = comm.world_size();
    for (int64_t n : f->layout_.unit_numel) {
        Unit u;
        u.shard = gpu_unit_shard(n, world);
        u.padded = u.shard * world;
        u.shard_begin = f->shard_total_;
        f->shard_total_ += u.shard;
        DT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&u.ready, cudaEventDisableTiming));
        f->units_.push_back(std::move(u));
    }
    DT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&f->scratch_, cudaEventDisableTiming));
    const size_t n = static_cast<size_t>(f->shard_total_);
    const size_t r = static_cast<size_t>(std::max<int64_t>(1, f->layout_.replicated_numel));
    // Frozen: the bf16 shards alone (and the small replicated fp32-read segment the kernels
    // need), no master, gradient or moments.
    DT_ASSIGN_OR_RETURN(f->half_, dev.allocate(n * sizeof(bf16)));
    DT_ASSIGN_OR_RETURN(f->rep_master_, dev.allocate(r * sizeof(float)));
    DT_ASSIGN_OR_RETURN(f->rep_half_, dev.allocate(r * sizeof(bf16)));
    if (!frozen) {
        DT_ASSIGN_OR_RETURN(f->master_, dev.allocate(n * sizeof(float)));
        DT_ASSIGN_OR_RETURN(f->grad_, dev.allocate(n * sizeof(float)));
        DT_ASSIGN_OR_RETURN(f->moments_, dev.allocate(2 * n * sizeof(float)));
        DT_ASSIGN_OR_RETURN(f->rep_grad_, dev.allocate(r * sizeof(float)));
        DT_ASSIGN_OR_RETURN(f->rep_moments_, dev.allocate(2 * r * sizeof(float)));
    }
    const cudaStream_t s = dev.compute_stream();
    for (DeviceMemory* m : {&f->master_, &f->half_, &f->grad_, &f->moments_, &f->rep_master_,
                            &f->rep_half_, &f->rep_grad_, &f->rep_moments_}) {
        if (m->get()) DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m->get(), 0, m->bytes(), s));
    }
    if (!frozen) DT_RETURN_IF_ERROR(f->track_embedding_rows());
    return f;
}

FsdpGpuParams::~FsdpGpuParams() {
    // After an abort the streams may hold collectives that never complete: free in stream order
    // without waiting (the process is on its way out).
    if (!comm_.aborted()) {
        cudaStreamSynchronize(dev_.comm_stream());
        cudaStreamSynchronize(dev_.compute_stream());
    }
    for (Unit& u : units_) {
        u.gathered.reset(), u.full_grad.reset();
        if (u.ready) cudaEventDestroy(u.ready);
    }
    if (scratch_) cudaEventDestroy(scratch_);
}

absl::StatusOr<std::vector<GpuOptimizerGroup>> FsdpGpuParams::optimizer_groups() {
    DT_RETURN_IF_ERROR(require_trained("optimizer_groups"));
    const int64_t n = shard_total_, r = layout_.replicated_numel;
    GpuOptimizerGroup shard{
        {AdamWTensorArgs{master_.as<float>(), moments_.as<float>(), moments_.as<float>() + n,
                         grad_.as<float>(), half_.as<bf16>(), n, 0, embed_mask_,
                         /*defer_unmarked=*/embed_slot_ >= 0}},
        /*sharded=*/true};
    GpuOptimizerGroup replicated{
        {AdamWTensorArgs{rep_master_.as<float>(), rep_moments_.as<float>(),
                         rep_moments_.as<float>() + r, rep_grad_.as<float>(), rep_half_.as<bf16>(),
                         r, 0}},
        /*sharded=*/false};
    return std::vector<GpuOptimizerGroup>{shard, replicated};
}

absl::Status FsdpGpuParams::prepare_update() {
    DT_RETURN_IF_ERROR(require_trained("step"));
    return order(comm_stream(), compute());  // the last reduce-scatters
}

absl::Status FsdpGpuParams::order(cudaStream_t from, cudaStream_t to) {
    DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(scratch_, from));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(to, scratch_, 0));
    return absl::OkStatus();
}

// Every piece of a parameter this rank holds: its slice of each sharded tensor, and every
// replicated tensor whole, with where the values go (the fp32 master, or the bf16 shard of a
// frozen base, which has no master).
std::vector<FsdpGpuParams::LocalPiece> FsdpGpuParams::local_pieces() {
    std::vector<LocalPiece> out;
    for (size_t i = 0; i < layout_.slots.size(); ++i) {
        const GpuParamSlot& slot = layout_.slots[i];
        if (slot.replicated) {
            out.push_back({i, 0, slot.numel, rep_master_.as<float>() + slot.offset, nullptr});
            continue;
        }
        const Unit& u = units_[static_cast<size_t>(slot.unit)];
        const int64_t lo = comm_.rank() * u.shard, hi = lo + u.shard;
        const int64_t a = std::max(lo, slot.offset), b = std::min(hi, slot.offset + slot.numel);
        if (a >= b) continue;
        const int64_t at = u.shard_begin + (a - lo);
        if (frozen_) {
            out.push_back({i, a - slot.offset, b - slot.offset, nullptr, half_.as<bf16>() + at});
        } else {
            out.push_back({i, a - slot.offset, b - slot.offset, master_.as<float>() + at, nullptr});
        }
    }
    return out;
}

// Calls fn(parameter index, first, last, fp32 destination) for every local piece; a frozen
// base's piece goes through fp32 scratch into its bf16 shard. Returns the first error.
absl::Status FsdpGpuParams::for_each_local_piece(
    const std::function<cudaError_t(size_t, int64_t, int64_t, float*)>& fn) {
    for (const LocalPiece& p : local_pieces()) {
        if (p.master) {
            DT_CUDA_RETURN_IF_ERROR(fn(p.param, p.first, p.last, p.master));
            continue;
        }
        DT_ASSIGN_OR_RETURN(DeviceMemory stage, dev_.allocate(sizeof(float) * (p.last - p.first)));
        DT_CUDA_RETURN_IF_ERROR(fn(p.param, p.first, p.last, stage.as<float>()));
        DT_CUDA_RETURN_IF_ERROR(
            cast_f32_to_bf16(p.half, stage.as<float>(), p.last - p.first, compute()));
    }
    return absl::OkStatus();
}

// The bf16 copies from freshly written fp32 masters; waits, as the host values may go away.
absl::Status FsdpGpuParams::refresh_half_from_masters() {
    const cudaStream_t s = compute();
    if (!frozen_) {  // frozen: for_each_local_piece wrote the bf16 shards
        DT_RETURN_IF_ERROR(reset_embedding_deferral());  // new masters: nothing is owed
        DT_CUDA_RETURN_IF_ERROR(
            cast_f32_to_bf16(half_.as<bf16>(), master_.as<float>(), shard_total_, s));
    }
    DT_CUDA_RETURN_IF_ERROR(cast_f32_to_bf16(rep_half_.as<bf16>(), rep_master_.as<float>(),
                                             layout_.replicated_numel, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::init_random(uint64_t seed) {
    const cudaStream_t s = compute();
    const float std_dev = static_cast<float>(config_.initializer_range);
    DT_RETURN_IF_ERROR(for_each_local_piece([&](size_t i, int64_t a, int64_t b, float* dst) {
        const GpuInitRule r = gpu_init_rule(names_[i], std_dev);
        return init_fill_f32(dst, b - a, static_cast<InitFill>(r.kind), r.a, r.b, seed, i, s, a);
    }));
    return refresh_half_from_masters();
}

absl::Status FsdpGpuParams::load(const ParamSet& params) {
    if (params.all().size() != layout_.slots.size()) {
        return absl::InvalidArgumentError("load: parameter set does not match the model");
    }
    const cudaStream_t s = compute();
    DT_RETURN_IF_ERROR(for_each_local_piece([&](size_t i, int64_t a, int64_t b, float* dst) {
        return cudaMemcpyAsync(dst, params.all()[i].value.data<float>() + a,
                               sizeof(float) * (b - a), cudaMemcpyHostToDevice, s);
    }));
    return refresh_half_from_masters();
}

std::vector<size_t> FsdpGpuParams::sample_order() const {
    std::vector<size_t> order;
    for (size_t unit = 0; unit < units_.size(); ++unit) {
        for (size_t i = 0; i < layout_.slots.size(); ++i) {
            const GpuParamSlot& slot = layout_.slots[i];
            if (!slot.replicated && slot.unit == static_cast<int>(unit)) order.push_back(i);
        }
    }
    for (size_t i = 0; i < layout_.slots.size(); ++i) {
        if (layout_.slots[i].replicated) order.push_back(i);
    }
    return order;
}

absl::StatusOr<std::vector<float>> FsdpGpuParams::download_sample(int64_t stride) {
    if (stride < 1) return absl::InvalidArgumentError("download_sample: stride must be >= 1");
    DT_RETURN_IF_ERROR(require_trained("download"));
    DT_RETURN_IF_ERROR(catch_up_embedding());
    const cudaStream_t s = compute();
    DT_RETURN_IF_ERROR(order(comm_stream(), s));
    std::vector<float> out;
    // Every stride-th of `numel` device floats from `src`, appended to `out`.
    auto append = [&](const float* src, int64_t numel) -> absl::Status {
        const int64_t count = (numel + stride - 1) / stride;
        const size_t at = out.size();
        out.resize(at + static_cast<size_t>(count));
        DT_CUDA_RETURN_IF_ERROR(cudaMemcpy2D(out.data() + at, sizeof(float), src,
                                             sizeof(float) * stride, sizeof(float), count,
                                             cudaMemcpyDeviceToHost));
        return absl::OkStatus();
    };
    DeviceMemory full;  // the unit of the sharded tensors being read, gathered
    int gathered = -1;
    for (size_t i : sample_order()) {
        const GpuParamSlot& slot = layout_.slots[i];
        if (slot.replicated) {
            DT_RETURN_IF_ERROR(append(rep_master_.as<float>() + slot.offset, slot.numel));
            continue;
        }
        if (slot.unit != gathered) {  // collective: every rank walks the same order
            const Unit& u = units_[static_cast<size_t>(slot.unit)];
            full.reset();
            DT_ASSIGN_OR_RETURN(full, dev_.allocate(sizeof(float) * u.padded));
            DT_RETURN_IF_ERROR(comm_.all_gather_f32(master_.as<float>() + u.shard_begin,
                                                    full.as<float>(), u.shard, s));
            DT_RETURN_IF_ERROR(comm_.wait(s));
            gathered = slot.unit;
        }
        DT_RETURN_IF_ERROR(append(full.as<float>() + slot.offset, slot.numel));
    }
    return out;
}

absl::Status FsdpGpuParams::download(ParamSet& params) {
    if (params.all().size() != layout_.slots.size()) {
        return absl::InvalidArgumentError("download: parameter set does not match the model");
    }
    DT_ASSIGN_OR_RETURN(std::vector<float> all, download_sample(1));  // stride 1: every element
    size_t at = 0;
    for (size_t i : sample_order()) {
        Tensor& t = params.all()[i].value;
        std::copy(all.begin() + static_cast<int64_t>(at),
                  all.begin() + static_cast<int64_t>(at) + t.numel(), t.data<float>());
        at += static_cast<size_t>(t.numel());
    }
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::require_trained(const char* what) const {
    if (!frozen_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the base is frozen (bf16 shards only, nothing trains here)"));
}

int FsdpGpuParams::next_unit(int unit, Phase phase) const {
    const int layers = layout_.num_units - 2, head = layout_.head_unit();
    if (phase == Phase::kBackward) return unit >= 2 && unit <= layers ? unit - 1 : -1;
    if (unit == head) return layout_.tied ? 1 : layers;  // tied: head first; else the backward's
    if (unit == layers) return head;                     // first layer
    return unit + 1;
}

absl::Status FsdpGpuParams::gather(int unit) {
    Unit& u = units_[static_cast<size_t>(unit)];
    // The comm stream waits for the compute stream's work so far: the bf16 shards' last update
    // (AdamW) and every earlier use of memory the pool may hand out again.
    DT_RETURN_IF_ERROR(order(compute(), comm_stream()));
    DT_ASSIGN_OR_RETURN(u.gathered,
                        dev_.allocator()->allocate(sizeof(bf16) * u.padded, comm_stream()));
    DT_RETURN_IF_ERROR(comm_.all_gather_bf16(half_.as<bf16>() + u.shard_begin, u.gathered.get(),
                                             static_cast<size_t>(u.shard), comm_stream()));
    DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(u.ready, comm_stream()));
    u.live = true;
    return absl::OkStatus();
}

// One rank holds every unit whole: the model reads the bf16 copy and adds its gradients into
// the fp32 gradient buffer in place. Gathering (a copy at world size 1), a zeroed full-size
// gradient, its reduce-scatter (another copy) and the accumulation into the shard (a read of
// both and a write) moved about 80 GB per 27B-slice step for nothing; the sums are the same
// (each micro-batch's dW adds into the same fp32 values in the same order).
GpuUnitPtrs FsdpGpuParams::whole_unit(const Unit& u) {
    GpuUnitPtrs p;
    p.half = half_.as<bf16>() + u.shard_begin;
    p.grad = frozen_ ? nullptr : grad_.as<float>() + u.shard_begin;
    p.rep_half = rep_half_.as<bf16>();
    p.rep_master = rep_master_.as<float>();
    p.rep_grad = rep_grad_.as<float>();  // null when frozen
    return p;
}

absl::StatusOr<GpuUnitPtrs> FsdpGpuParams::acquire(int unit, Phase phase, bool grads) {
    if (unit < 0 || unit >= layout_.num_units) {
        return absl::OutOfRangeError("parameter unit out of range");
    }
    Unit& u = units_[static_cast<size_t>(unit)];
    if (comm_.world_size() == 1) {
        GpuUnitPtrs p = whole_unit(u);
        if (embed_slot_ >= 0 && unit == layout_.slots[static_cast<size_t>(embed_slot_)].unit) {
            p.embed_rows_touched = embed_rows_.as<uint8_t>();
        }
        return p;
    }
    // The embedding's backward scatters rows into its gradient and never reads the weights.
    const bool weights = !(unit == 0 && phase == Phase::kBackward);
    if (weights && !u.live) DT_RETURN_IF_ERROR(gather(unit));
    if (grads && !frozen_ && !u.full_grad.get()) {
        DT_ASSIGN_OR_RETURN(u.full_grad,
                            dev_.allocator()->allocate(sizeof(float) * u.padded, comm_stream()));
        DT_CUDA_RETURN_IF_ERROR(
            cudaMemsetAsync(u.full_grad.get(), 0, u.full_grad.bytes(), comm_stream()));
        DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(u.ready, comm_stream()));
    }
    DT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute(), u.ready, 0));
    const int next = next_unit(unit, phase);
    if (next >= 0 && !units_[static_cast<size_t>(next)].live &&
        units_[static_cast<size_t>(next)].padded > 0) {
        DT_RETURN_IF_ERROR(gather(next));  // prefetch: overlaps this unit's compute
    }
    GpuUnitPtrs p;
    p.half = weights ? u.gathered.as<bf16>() : nullptr;
    p.grad = u.full_grad.get() ? u.full_grad.as<float>() : nullptr;
    p.rep_half = rep_half_.as<bf16>();
    p.rep_master = rep_master_.as<float>();
    p.rep_grad = rep_grad_.as<float>();
    return p;
}

absl::Status FsdpGpuParams::release(int unit, Phase phase) {
    if (unit < 0 || unit >= layout_.num_units) {
        return absl::OutOfRangeError("parameter unit out of range");
    }
    if (comm_.world_size() == 1) return absl::OkStatus();  // whole_unit: nothing to give back
    Unit& u = units_[static_cast<size_t>(unit)];
    // Everything the compute stream did with the unit (reads of the weights, gradient writes)
    // precedes what the comm stream does next with its memory.
    DT_RETURN_IF_ERROR(order(compute(), comm_stream()));
    if (phase == Phase::kBackward && u.full_grad.get() && sync_grads_) {
        DT_ASSIGN_OR_RETURN(DeviceMemory part,
                            dev_.allocator()->allocate(sizeof(float) * u.shard, comm_stream()));
        DT_RETURN_IF_ERROR(comm_.reduce_scatter_sum_f32(u.full_grad.as<float>(), part.as<float>(),
                                                        static_cast<size_t>(u.shard),
                                                        comm_stream()));
        DT_CUDA_RETURN_IF_ERROR(accumulate_f32(grad_.as<float>() + u.shard_begin, part.as<float>(),
                                               u.shard, comm_stream()));
        u.full_grad.reset();  // both freed in comm-stream order, after the reduction
    }
    u.gathered.reset();
    u.live = false;
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::synchronize() {
    return comm_.wait(compute());
}

absl::Status FsdpGpuParams::all_reduce_host(std::vector<double>& values) {
    // The daemon's GPU ranks' host collective: fp64, staged on the compute stream after the step.
    return NcclHostCommunicator(dev_, comm_).all_reduce_sum(values.data(), values.size());
}

int64_t FsdpGpuParams::comm_bytes_per_step() const {
    const int64_t w = comm_.world_size();
    if (w == 1) return 0;
    int64_t bytes = 0;
    for (size_t i = 0; i < units_.size(); ++i) {
        const int64_t others = units_[i].padded / w * (w - 1);  // elements of the other ranks
        // bf16 gathers: the embedding and the layers in the forward and again in the backward,
        // the head once (held from its forward to its backward); one fp32 reduce-scatter each.
        const bool head = static_cast<int>(i) == layout_.head_unit();
        bytes += others * 2 * (head ? 1 : 2);
        bytes += others * 4;
    }
    return bytes + 2 * layout_.replicated_numel * 4 * (w - 1) / w;  // replicated all-reduce
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
