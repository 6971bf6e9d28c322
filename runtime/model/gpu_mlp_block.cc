// SwiGLU MLP block on the GPU: gate/up GEMMs, fused SwiGLU, down GEMM; backward mirrors forward.
#if DELTATUNE_HAVE_CUDA
#include "kernels/mlp/swiglu.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/model/gpu_blocks.h"
#include "runtime/model/gpu_proj.h"

namespace deltatune {

absl::Status gpu_mlp_forward(const GpuCtx& x, const GpuLayer& w, const bf16* a, bf16* out,
                             GpuMlpActs& acts) {
    const int64_t T = x.b.tokens, H = x.c.hidden_size, I = x.c.intermediate_size;
    const size_t bytes = sizeof(bf16) * static_cast<size_t>(T * I);
    DT_ASSIGN_OR_RETURN(acts.gate, x.dev.allocate(bytes));
    DT_ASSIGN_OR_RETURN(acts.up, x.dev.allocate(bytes));
    DT_ASSIGN_OR_RETURN(acts.h, x.dev.allocate(bytes));
    DT_RETURN_IF_ERROR(proj_forward(x, w.mlp_gate, acts.gate.get(), a, H, I));
    DT_RETURN_IF_ERROR(proj_forward(x, w.mlp_up, acts.up.get(), a, H, I));
    DT_CUDA_RETURN_IF_ERROR(swiglu_forward(acts.h.as<bf16>(), acts.gate.as<bf16>(),
                                           acts.up.as<bf16>(), T * I, x.stream()));
    return proj_forward(x, w.mlp_down, out, acts.h.get(), I, H);
}

absl::Status gpu_mlp_backward(const GpuCtx& x, const GpuLayer& w, const bf16* a, const bf16* dout,
                              bf16* da, const GpuMlpActs& acts) {
    const int64_t T = x.b.tokens, H = x.c.hidden_size, I = x.c.intermediate_size;
    const size_t bytes = sizeof(bf16) * static_cast<size_t>(T * I);
    DT_ASSIGN_OR_RETURN(DeviceMemory dh, x.dev.allocate(bytes));
    DT_ASSIGN_OR_RETURN(DeviceMemory dgate, x.dev.allocate(bytes));
    DT_ASSIGN_OR_RETURN(DeviceMemory dup, x.dev.allocate(bytes));
    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.mlp_down, dh.get(), dout, acts.h.get(), I, H, false));
    DT_RETURN_IF_ERROR(proj_backward_dw(x, w.mlp_down, dout, acts.h.get(), I, H));
    DT_CUDA_RETURN_IF_ERROR(swiglu_backward(dgate.as<bf16>(), dup.as<bf16>(), dh.as<bf16>(),
                                            acts.gate.as<bf16>(), acts.up.as<bf16>(), T * I,
                                            x.stream()));
    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.mlp_up, da, dup.get(), a, H, I, false));
    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.mlp_gate, da, dgate.get(), a, H, I, true));
    DT_RETURN_IF_ERROR(proj_backward_dw(x, w.mlp_up, dup.get(), a, H, I));
    return proj_backward_dw(x, w.mlp_gate, dgate.get(), a, H, I);
}

}  // namespace deltatune
#endif
