// The single-device parameter source (flat fp32 masters, bf16 copies and fp32 gradients) and what
// Qwen35GpuModel does with it: zeroing and exporting gradients, and handing its tensors to the
// optimizer (runtime/optim/gpu_optimizer.h).
#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/model/qwen35_gpu_model_impl.h"

namespace deltatune {

FlatParamSource::FlatParamSource(const GpuParamLayout& layout, const bf16* half,
                                 const float* master, float* grad, cudaStream_t compute)
    : half_(half), master_(master), grad_(grad), compute_(compute) {
    int64_t at = 0;
    for (int64_t n : layout.unit_numel) begin_.push_back(at), at += n;
}

absl::StatusOr<GpuUnitPtrs> FlatParamSource::acquire(int unit, Phase, bool) {
    if (unit < 0 || unit >= static_cast<int>(begin_.size())) {
        return absl::OutOfRangeError("parameter unit out of range");
    }
    const int64_t o = begin_[static_cast<size_t>(unit)];
    GpuUnitPtrs u;
    u.half = half_ + o, u.master = master_ + o, u.grad = grad_ + o;
    return u;
}

absl::Status FlatParamSource::synchronize() {
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
    return absl::OkStatus();
}

absl::Status Qwen35GpuModel::Impl::require_flat(const char* what) const {
    if (flat) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": this model's parameters live in an outside (sharded) source"));
}

absl::Status Qwen35GpuModel::Impl::require_trained_base(const char* what) const {
    DT_RETURN_IF_ERROR(require_flat(what));
    if (!lora) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the base is frozen under a LoRA adapter (the adapter trains)"));
}

namespace {

// Zeroes the gradient slices of the parameters `which` selects, runs of neighbours (alignment
// padding between them included) in one memset.
absl::Status zero_grad_slices(Qwen35GpuModel::Impl& m, const std::function<bool(size_t)>& which) {
    float* g = m.grad.as<float>();
    int64_t run_begin = -1, run_end = -1;
    auto flush = [&]() -> cudaError_t {
        if (run_begin < 0) return cudaSuccess;
        const cudaError_t e =
            cudaMemsetAsync(g + run_begin, 0, sizeof(float) * (run_end - run_begin), m.s());
        run_begin = -1;
        return e;
    };
    for (size_t i = 0; i < m.offset.size(); ++i) {
        if (!which(i)) continue;
        const int64_t b = m.offset[i], e = b + m.numel[i];
        if (run_begin >= 0 && b >= run_begin && b <= run_end + kGpuParamAlign) {
            run_end = std::max(run_end, e);
            continue;
        }
        DT_CUDA_RETURN_IF_ERROR(flush());
        run_begin = b, run_end = e;
    }
    DT_CUDA_RETURN_IF_ERROR(flush());
    return absl::OkStatus();
}

// Gradients still left to a dW GEMM that has not run (no backward since zero_grads) are zero.
absl::Status settle_fresh_grads(Qwen35GpuModel::Impl& m) {
    if (std::none_of(m.fresh.begin(), m.fresh.end(), [](char f) { return f != 0; })) {
        return absl::OkStatus();
    }
    DT_RETURN_IF_ERROR(zero_grad_slices(m, [&](size_t i) { return m.fresh[i] != 0; }));
    std::fill(m.fresh.begin(), m.fresh.end(), 0);
    return absl::OkStatus();
}

}  // namespace

absl::Status Qwen35GpuModel::zero_grads() {
    DT_RETURN_IF_ERROR(impl_->require_trained_base("zero_grads"));
    // Only the gradients that kernels add into are zeroed; the projections' are left to their
    // dW GEMM, which writes them (Impl::fresh).
    Impl& m = *impl_;
    m.fresh = m.gemm_grad;
    return zero_grad_slices(m, [&](size_t i) { return m.gemm_grad[i] == 0; });
}

namespace {

// Every parameter's slice of a flat fp32 device buffer into `out` (same names and shapes).
absl::Status copy_flat_to_host(const Qwen35GpuModel::Impl& m, const float* flat, ParamSet& out) {
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.s()));
    for (size_t i = 0; i < out.all().size(); ++i) {
        Tensor& t = out.all()[i].value;
        DT_CUDA_RETURN_IF_ERROR(cudaMemcpy(t.data<float>(), flat + m.offset[i],
                                           sizeof(float) * m.numel[i], cudaMemcpyDeviceToHost));
    }
    return absl::OkStatus();
}

}  // namespace

absl::Status Qwen35GpuModel::download_grads(ParamSet& grads) const {
    DT_RETURN_IF_ERROR(impl_->require_trained_base("download_grads"));
    DT_RETURN_IF_ERROR(settle_fresh_grads(*impl_));
    return copy_flat_to_host(*impl_, impl_->grad.as<float>(), grads);
}

absl::Status Qwen35GpuModel::download_params(ParamSet& params) const {
    DT_RETURN_IF_ERROR(impl_->require_flat("download_params"));
    return copy_flat_to_host(*impl_, impl_->master.as<float>(), params);
}

namespace {

// The flat buffers as the optimizer's one replicated group, a tensor per parameter; the moments
// are allocated (zero) on the first call and kept on the device.
class FlatParamStore final : public GpuParamStore {
  public:
    explicit FlatParamStore(Qwen35GpuModel::Impl& m) : m_(m) {}

    absl::StatusOr<std::vector<GpuOptimizerGroup>> optimizer_groups() override {
        Qwen35GpuModel::Impl& m = m_;
        DT_RETURN_IF_ERROR(m.require_trained_base("optimizer_groups"));
        if (!m.moments.get()) {
            const size_t n = sizeof(float) * static_cast<size_t>(m.total);
            DT_ASSIGN_OR_RETURN(m.moments, m.dev.allocate(2 * n));
            DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.moments.get(), 0, 2 * n, m.s()));
        }
        GpuOptimizerGroup g;
        float* mom = m.moments.as<float>();
        for (size_t i = 0; i < m.offset.size(); ++i) {
            const int64_t o = m.offset[i];
            g.tensors.push_back(AdamWTensorArgs{m.master.as<float>() + o, mom + o,
                                                mom + m.total + o, m.grad.as<float>() + o,
                                                m.half.as<bf16>() + o, m.numel[i], 0});
        }
        return std::vector<GpuOptimizerGroup>{std::move(g)};
    }

    absl::Status prepare_update() override {
        DT_RETURN_IF_ERROR(m_.require_trained_base("update"));
        return settle_fresh_grads(m_);
    }

  private:
    Qwen35GpuModel::Impl& m_;
};

}  // namespace

absl::StatusOr<GpuParamStore*> Qwen35GpuModel::param_store() {
    DT_RETURN_IF_ERROR(impl_->require_trained_base("param_store"));
    if (!impl_->store) impl_->store = std::make_unique<FlatParamStore>(*impl_);
    return impl_->store.get();
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
