// FsdpGpuParams' optimizer step (see fsdp_gpu.h): the global gradient norm and the clip
// coefficient on the compute stream, then AdamW unit by unit in the forward's order, on the
// compute stream or beside the next step's forward.
//
// Why beside, and confined: AdamW moves 30 bytes per parameter and nothing else; the GEMMs that
// fill the forward move few bytes per FLOP. Side by side on every multiprocessor, the GEMMs'
// persistent grids wait for the update's blocks and slow by what the update saves. Confined to k
// multiprocessors (1024-thread blocks), the update still moves about 55 GB/s per
// multiprocessor, almost twice the 31 GB/s it gets per multiprocessor spread over all of them,
// while the GEMMs, told to use the others, lose about their share (kernels_bench
// "[overlap_bench]" on an H200: beside GEMMs, about 55% of the update's time is hidden).
#include "runtime/dist/fsdp_gpu.h"

#if DELTATUNE_HAVE_CUDA
#include <algorithm>

#include "kernels/adamw.h"
#include "kernels/grad_norm.h"
#include "kernels/shard_reduce.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/device/gemm.h"

namespace deltatune {

namespace {
using bf16 = __nv_bfloat16;
// The forward waits for these first units' updates at once (the embedding and the first layer):
// they run at full width; the rest are confined beside the layers' forward.
constexpr int kFullWidthUnits = 2;
}  // namespace

void FsdpGpuParams::set_update_sms(int sms) {
    update_sms_ = std::clamp(sms, 0, device_sms_ / 2);
}

absl::Status FsdpGpuParams::plan_updates() {
    const int64_t n = shard_total_, r = layout_.replicated_numel;
    std::vector<AdamWTensorArgs> ts;
    for (const Unit& u : units_) {  // shard_begin is a multiple of 128 elements: 16-byte access
        const int64_t b = u.shard_begin;
        ts.push_back(AdamWTensorArgs{master_.as<float>() + b, moments_.as<float>() + b,
                                     moments_.as<float>() + n + b, grad_.as<float>() + b,
                                     half_.as<bf16>() + b, u.shard, 0});
    }
    ts.push_back(AdamWTensorArgs{rep_master_.as<float>(), rep_moments_.as<float>(),
                                 rep_moments_.as<float>() + r, rep_grad_.as<float>(),
                                 rep_half_.as<bf16>(), r, 0});
    for (AdamWTensorArgs& t : ts) update_chunks_.push_back(t.n > 0 ? adamw_plan_chunks(&t, 1) : 0);
    DT_ASSIGN_OR_RETURN(update_args_, dev_.allocate(sizeof(AdamWTensorArgs) * ts.size()));
    // One planned GradNormTensor array per norm: [shard], [replicated].
    GradNormTensor norms[2] = {{grad_.as<float>(), n, 0}, {rep_grad_.as<float>(), r, 0}};
    norm_chunks_shard_ = grad_norm_plan_chunks(&norms[0], 1);
    norm_chunks_rep_ = r > 0 ? grad_norm_plan_chunks(&norms[1], 1) : 0;
    norm_work_bytes_ = grad_norm_workspace_bytes(std::max(norm_chunks_shard_, norm_chunks_rep_));
    DT_ASSIGN_OR_RETURN(norm_work_, dev_.allocate(norm_work_bytes_));
    DT_ASSIGN_OR_RETURN(norm_tensors_, dev_.allocate(sizeof(norms)));
    const cudaStream_t s = compute();
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(update_args_.get(), ts.data(),
                                            sizeof(AdamWTensorArgs) * ts.size(),
                                            cudaMemcpyHostToDevice, s));
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(norm_tensors_.get(), norms, sizeof(norms), cudaMemcpyHostToDevice, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));  // the host arrays go away
    return absl::OkStatus();
}

std::vector<int> FsdpGpuParams::forward_order() const {
    const int head = layout_.head_unit();
    std::vector<int> order;
    if (layout_.tied) order.push_back(head);  // the tied head (the embedding) is acquired first
    for (int u = 0; u < layout_.num_units; ++u) {
        if (u != head) order.push_back(u);
    }
    if (!layout_.tied) order.push_back(head);
    return order;
}

absl::Status FsdpGpuParams::launch_updates(const AdamWHyper& hyper, int64_t step,
                                           const float* clip) {
    const bool beside = update_sms_ > 0;
    const cudaStream_t us = beside ? update_stream_ : compute();
    if (beside) DT_RETURN_IF_ERROR(order(compute(), us));  // the gradients, norm and coefficient
    const AdamWTensorArgs* args = update_args_.as<AdamWTensorArgs>();
    const size_t rep = units_.size();  // first: every layer reads the replicated segment
    DT_CUDA_RETURN_IF_ERROR(
        adamw_multi_tensor_step(args + rep, 1, update_chunks_[rep], hyper, step, clip, us));
    DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(rep_updated_, us));
    int full_width = kFullWidthUnits;
    for (int unit : forward_order()) {
        const size_t i = static_cast<size_t>(unit);
        const int width = beside && full_width <= 0 ? update_sms_ : 0;
        if (units_[i].shard > 0) --full_width;
        DT_CUDA_RETURN_IF_ERROR(
            adamw_multi_tensor_step(args + i, 1, update_chunks_[i], hyper, step, clip, us, width));
        DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(units_[i].updated, us));
    }
    update_beside_forward_ = beside;
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::zero_deferred(Unit& u) {
    for (const auto& [b, e] : u.zero_runs) {
        DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
            grad_.as<float>() + b, 0, sizeof(float) * static_cast<size_t>(e - b), compute()));
    }
    u.zero_runs.clear();
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::before_use(int unit, Phase phase) {
    Unit& u = units_[static_cast<size_t>(unit)];
    if (update_beside_forward_) {
        const cudaStream_t s = compute();
        DT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s, rep_updated_, 0));
        DT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s, u.updated, 0));
        // While later units' updates run, this unit's GEMMs leave them their multiprocessors.
        // The last unit's update is the update stream's last work: once the compute stream
        // waited for it, every unit's has been waited for.
        const bool more = phase == Phase::kForward && unit != forward_order().back();
        if (Gemm* g = dev_.gemm()) g->set_sm_count_target(more ? device_sms_ - update_sms_ : 0);
        if (!more) update_beside_forward_ = false;
    }
    if (!u.zero_runs.empty()) DT_RETURN_IF_ERROR(zero_deferred(u));  // its update read them
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::join_update() {
    DT_RETURN_IF_ERROR(order(update_stream_, compute()));
    if (update_beside_forward_) {
        if (Gemm* g = dev_.gemm()) g->set_sm_count_target(0);
        update_beside_forward_ = false;
    }
    return absl::OkStatus();
}

absl::StatusOr<double> FsdpGpuParams::step(const AdamWHyper& hyper, int64_t step,
                                           double max_grad_norm) {
    const cudaStream_t s = compute();
    DT_RETURN_IF_ERROR(order(comm_stream(), s));  // the last reduce-scatters
    DT_RETURN_IF_ERROR(join_update());            // a step without a forward in between
    for (Unit& u : units_) {                      // a unit this step never used: zero it now
        if (!u.zero_runs.empty()) DT_RETURN_IF_ERROR(zero_deferred(u));
    }
    const int64_t r = layout_.replicated_numel;
    float* sc = scalars_.as<float>();
    if (r > 0) {
        DT_RETURN_IF_ERROR(
            comm_.all_reduce_sum_f32(rep_grad_.as<float>(), static_cast<size_t>(r), s));
    }
    const GradNormTensor* nt = norm_tensors_.as<GradNormTensor>();
    DT_CUDA_RETURN_IF_ERROR(global_grad_norm(sc + 0, nullptr, nt, 1, norm_chunks_shard_, 0.0f,
                                             norm_work_.get(), norm_work_bytes_, s));
    if (r > 0) {
        DT_CUDA_RETURN_IF_ERROR(global_grad_norm(sc + 1, nullptr, nt + 1, 1, norm_chunks_rep_, 0.0f,
                                                 norm_work_.get(), norm_work_bytes_, s));
    }
    // The replicated gradients are the same on every rank: counted once (rank 0).
    const bool count_rep = r > 0 && comm_.rank() == 0;
    DT_CUDA_RETURN_IF_ERROR(grad_norm_square_sum(sc + 2, sc + 0, count_rep ? sc + 1 : nullptr, s));
    DT_RETURN_IF_ERROR(comm_.all_reduce_sum_f32(sc + 2, 1, s));
    DT_CUDA_RETURN_IF_ERROR(
        grad_norm_from_square(sc + 3, sc + 4, sc + 2, static_cast<float>(max_grad_norm), s));
    DT_RETURN_IF_ERROR(launch_updates(hyper, step, max_grad_norm > 0 ? sc + 4 : nullptr));
    // Wait (polling NCCL) before reading back: a copy into pageable memory blocks the host until
    // the stream reaches it, which a dead peer would make forever.
    DT_RETURN_IF_ERROR(comm_.wait(s));
    float norm = 0;
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpy(&norm, sc + 3, sizeof(float), cudaMemcpyDeviceToHost));
    return static_cast<double>(norm);
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
