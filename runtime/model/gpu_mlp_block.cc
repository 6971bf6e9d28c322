// SwiGLU MLP block on the GPU: gate/up GEMMs, fused SwiGLU, down GEMM; backward mirrors forward.
#if DELTATUNE_HAVE_CUDA
#include "kernels/swiglu.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/model/gpu_blocks.h"

namespace deltatune {

absl::Status gpu_mlp_forward(const GpuCtx& x, const GpuLayer& w, const bf16* a, bf16* out,
                             GpuMlpActs& acts) {
    const int64_t T = x.b.tokens, H = x.c.hidden_size, I = x.c.intermediate_size;
    const size_t bytes = sizeof(bf16) * static_cast<size_t>(T * I);
    DT_ASSIGN_OR_RETURN(acts.gate, x.dev.allocate(bytes));
    DT_ASSIGN_OR_RETURN(acts.up, x.dev.allocate(bytes));
    DT_ASSIGN_OR_RETURN(acts.h, x.dev.allocate(bytes));
    DT_RETURN_IF_ERROR(
        linear_forward(x.gemm(), acts.gate.get(), a, w.mlp_gate.w, T, H, I, x.stream()));
    DT_RETURN_IF_ERROR(linear_forward(x.gemm(), acts.up.get(), a, w.mlp_up.w, T, H, I, x.stream()));
    DT_CUDA_RETURN_IF_ERROR(swiglu_forward(acts.h.as<bf16>(), acts.gate.as<bf16>(),
                                           acts.up.as<bf16>(), T * I, x.stream()));
    return linear_forward(x.gemm(), out, acts.h.get(), w.mlp_down.w, T, I, H, x.stream());
}

absl::Status gpu_mlp_backward(const GpuCtx& x, const GpuLayer& w, const bf16* a, const bf16* dout,
                              bf16* da, const GpuMlpActs& acts) {
    const int64_t T = x.b.tokens, H = x.c.hidden_size, I = x.c.intermediate_size;
    const size_t bytes = sizeof(bf16) * static_cast<size_t>(T * I);
    DT_ASSIGN_OR_RETURN(DeviceMemory dh, x.dev.allocate(bytes));
    DT_ASSIGN_OR_RETURN(DeviceMemory dgate, x.dev.allocate(bytes));
    DT_ASSIGN_OR_RETURN(DeviceMemory dup, x.dev.allocate(bytes));
    Gemm& g = x.gemm();
    DT_RETURN_IF_ERROR(
        linear_backward_dx(g, dh.get(), dout, w.mlp_down.w, T, I, H, false, x.stream()));
    DT_RETURN_IF_ERROR(linear_backward_dw(g, w.mlp_down.grad, dout, acts.h.get(), T, I, H,
                                          x.stream(), !w.mlp_down.fresh));
    DT_CUDA_RETURN_IF_ERROR(swiglu_backward(dgate.as<bf16>(), dup.as<bf16>(), dh.as<bf16>(),
                                            acts.gate.as<bf16>(), acts.up.as<bf16>(), T * I,
                                            x.stream()));
    DT_RETURN_IF_ERROR(
        linear_backward_dx(g, da, dup.get(), w.mlp_up.w, T, H, I, false, x.stream()));
    DT_RETURN_IF_ERROR(
        linear_backward_dx(g, da, dgate.get(), w.mlp_gate.w, T, H, I, true, x.stream()));
    DT_RETURN_IF_ERROR(
        linear_backward_dw(g, w.mlp_up.grad, dup.get(), a, T, H, I, x.stream(), !w.mlp_up.fresh));
    return linear_backward_dw(g, w.mlp_gate.grad, dgate.get(), a, T, H, I, x.stream(),
                              !w.mlp_gate.fresh);
}

}  // namespace deltatune
#endif
