#include "runtime/optim/gpu_optimizer.h"

#if DELTATUNE_HAVE_CUDA
#include <algorithm>

#include "kernels/optim/shard_reduce.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {

absl::StatusOr<std::unique_ptr<GpuOptimizer>> GpuOptimizer::create(DeviceContext& dev,
                                                                   GpuParamStore& store,
                                                                   NcclCommunicator* comm) {
    DT_ASSIGN_OR_RETURN(std::vector<GpuOptimizerGroup> groups, store.optimizer_groups());
    std::unique_ptr<GpuOptimizer> o(new GpuOptimizer(dev, store, comm));
    DT_RETURN_IF_ERROR(o->plan(groups));
    if (o->deferred_) store.attach_deferred_rows(o->deferred_.get());
    return o;
}

// Rows still owed are applied first: the store's masters must not outlive the optimizer stale.
GpuOptimizer::~GpuOptimizer() {
    if (!deferred_) return;
    (void)deferred_->catch_up_all();
    store_.attach_deferred_rows(nullptr);
}

// The AdamW launch over every tensor, group after group, and the norm launches: one over the
// sharded tensors and one over the replicated when any group is sharded, else one over all.
absl::Status GpuOptimizer::plan(const std::vector<GpuOptimizerGroup>& groups) {
    std::vector<AdamWTensorArgs> all, sharded;
    for (const GpuOptimizerGroup& g : groups) {
        any_sharded_ = any_sharded_ || g.sharded;
        for (const AdamWTensorArgs& t : g.tensors) {
            if (t.n == 0) continue;
            all.push_back(t);
            (g.sharded ? sharded : replicated_).push_back(t);
            if (!t.defer_unmarked) continue;
            if (deferred_) return absl::UnimplementedError("optimizer: two deferring tensors");
            DT_ASSIGN_OR_RETURN(deferred_, DeferredRows::create(dev_, t));
        }
    }
    if (all.empty()) return absl::InvalidArgumentError("optimizer: the store has no tensors");
    if (any_sharded_) {
        DT_ASSIGN_OR_RETURN(sharded_norm_, plan_norm(sharded));
        DT_ASSIGN_OR_RETURN(replicated_norm_, plan_norm(replicated_));
    } else {
        DT_ASSIGN_OR_RETURN(all_norm_, plan_norm(all));
    }
    adamw_count_ = static_cast<int>(all.size());
    adamw_chunks_ = adamw_plan_chunks(all.data(), adamw_count_);
    DT_ASSIGN_OR_RETURN(adamw_tensors_, dev_.allocate(sizeof(AdamWTensorArgs) * all.size()));
    const int64_t chunks =
        std::max({sharded_norm_.chunks, replicated_norm_.chunks, all_norm_.chunks});
    norm_work_bytes_ = grad_norm_workspace_bytes(chunks);
    DT_ASSIGN_OR_RETURN(norm_work_, dev_.allocate(std::max<size_t>(norm_work_bytes_, 16)));
    DT_ASSIGN_OR_RETURN(scalars_, dev_.allocate(sizeof(Scalars)));
    const cudaStream_t s = dev_.compute_stream();
    DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scalars_.get(), 0, scalars_.bytes(), s));
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(adamw_tensors_.get(), all.data(),
                                            adamw_tensors_.bytes(), cudaMemcpyHostToDevice, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));  // the host arrays go away
    return absl::OkStatus();
}

absl::StatusOr<GpuOptimizer::NormPlan> GpuOptimizer::plan_norm(
    const std::vector<AdamWTensorArgs>& tensors) {
    NormPlan p;
    if (tensors.empty()) return p;
    std::vector<GradNormTensor> ts;
    for (const AdamWTensorArgs& t : tensors) ts.push_back(GradNormTensor{t.grad, t.n, 0, t.rows});
    p.count = static_cast<int>(ts.size());
    p.chunks = grad_norm_plan_chunks(ts.data(), p.count);
    DT_ASSIGN_OR_RETURN(p.tensors, dev_.allocate(sizeof(GradNormTensor) * ts.size()));
    const cudaStream_t s = dev_.compute_stream();
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(p.tensors.get(), ts.data(), p.tensors.bytes(), cudaMemcpyHostToDevice, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));  // `ts` goes away
    return p;
}

// Replicated gradients hold each rank's part of the batch: summed, they are the same everywhere.
absl::Status GpuOptimizer::sum_replicated_grads() {
    if (!multi_rank()) return absl::OkStatus();
    for (const AdamWTensorArgs& t : replicated_) {
        DT_RETURN_IF_ERROR(comm_->all_reduce_sum_f32(
            const_cast<float*>(t.grad), static_cast<size_t>(t.n), dev_.compute_stream()));
    }
    return absl::OkStatus();
}

// Scalars::norm and ::clip_coef on the device (no host wait).
absl::Status GpuOptimizer::norm(float max_grad_norm) {
    const cudaStream_t s = dev_.compute_stream();
    Scalars* sc = scalars_.as<Scalars>();
    auto launch = [&](float* out, float* clip, const NormPlan& p, float max) -> absl::Status {
        DT_CUDA_RETURN_IF_ERROR(global_grad_norm(out, clip, p.tensors.as<GradNormTensor>(), p.count,
                                                 p.chunks, max, norm_work_.get(), norm_work_bytes_,
                                                 s));
        return absl::OkStatus();
    };
    if (!any_sharded_) return launch(&sc->norm, &sc->clip_coef, all_norm_, max_grad_norm);
    DT_RETURN_IF_ERROR(launch(&sc->sharded_norm, nullptr, sharded_norm_, 0.0f));
    const bool rep = replicated_norm_.count > 0;
    if (rep) DT_RETURN_IF_ERROR(launch(&sc->replicated_norm, nullptr, replicated_norm_, 0.0f));
    // The replicated gradients are the same on every rank: counted once (rank 0).
    const bool count_rep = rep && (!comm_ || comm_->rank() == 0);
    DT_CUDA_RETURN_IF_ERROR(grad_norm_square_sum(&sc->square_sum, &sc->sharded_norm,
                                                 count_rep ? &sc->replicated_norm : nullptr, s));
    if (multi_rank()) DT_RETURN_IF_ERROR(comm_->all_reduce_sum_f32(&sc->square_sum, 1, s));
    DT_CUDA_RETURN_IF_ERROR(
        grad_norm_from_square(&sc->norm, &sc->clip_coef, &sc->square_sum, max_grad_norm, s));
    return absl::OkStatus();
}

absl::StatusOr<double> GpuOptimizer::read_norm() {
    const cudaStream_t s = dev_.compute_stream();
    // Wait (polling NCCL) before reading back: a copy into pageable memory blocks the host until
    // the stream reaches it, which a dead peer would make forever.
    if (comm_) DT_RETURN_IF_ERROR(comm_->wait(s));
    float norm = 0;
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&norm, &scalars_.as<Scalars>()->norm, sizeof(float),
                                            cudaMemcpyDeviceToHost, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return static_cast<double>(norm);
}

absl::StatusOr<double> GpuOptimizer::grad_norm() {
    if (multi_rank()) {  // summing the replicated gradients here would sum them twice in step()
        return absl::FailedPreconditionError("grad_norm alone is for one device");
    }
    DT_RETURN_IF_ERROR(store_.prepare_update());
    DT_RETURN_IF_ERROR(norm(0.0f));
    return read_norm();
}

absl::StatusOr<double> GpuOptimizer::step(const AdamWHyper& hyper, int64_t step,
                                          double max_grad_norm) {
    DT_RETURN_IF_ERROR(store_.prepare_update());
    DT_RETURN_IF_ERROR(sum_replicated_grads());
    DT_RETURN_IF_ERROR(norm(static_cast<float>(max_grad_norm)));
    if (deferred_) DT_RETURN_IF_ERROR(deferred_->record(hyper, step));
    const float* clip = max_grad_norm > 0 ? &scalars_.as<Scalars>()->clip_coef : nullptr;
    DT_CUDA_RETURN_IF_ERROR(adamw_multi_tensor_step(adamw_tensors_.as<AdamWTensorArgs>(),
                                                    adamw_count_, adamw_chunks_, hyper, step, clip,
                                                    dev_.compute_stream()));
    if (deferred_) DT_RETURN_IF_ERROR(deferred_->count());
    return read_norm();
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
