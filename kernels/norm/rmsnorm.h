// Zero-centred RMSNorm (Qwen3.5 input/post/final norms and q_norm/k_norm): the weight is stored as
// the offset from 1.  y = x * rstd * (1 + w),  rstd = 1 / sqrt(mean(x^2) + eps), per row.
// Gradient contract: dx is written (=), dw is accumulated (+=).
#pragma once
#include <cstddef>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

// out, x: (rows, cols); w: (cols); rstd: (rows), saved for backward.
template <typename T>
void rmsnorm_forward_ref(T* out, T* rstd, const T* x, const T* w, int64_t rows, int64_t cols,
                         T eps);
template <typename T>
void rmsnorm_backward_ref(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                          int64_t rows, int64_t cols);

#if DELTATUNE_HAVE_CUDA
// CUDA, fused with the residual add of the decoder layer (device pointers, stream-ordered):
//   s = bf16(x + residual);  y = bf16(s * rstd * (1 + w)),  fp32 math in between.
// residual may be null (s = x; residual_out is then not written). x, residual, residual_out, y:
// (rows, cols) bf16; w: (cols) bf16; rstd: (rows) fp32, saved for backward.
bool rmsnorm_supported(int64_t rows, int64_t cols);
cudaError_t rmsnorm_residual_forward(__nv_bfloat16* y, __nv_bfloat16* residual_out, float* rstd,
                                     const __nv_bfloat16* x, const __nv_bfloat16* residual,
                                     const __nv_bfloat16* w, int64_t rows, int64_t cols, float eps,
                                     cudaStream_t stream);
// ds = rmsnorm_backward(dy) + dresidual (the gradient reaching s through the residual stream;
// may be null), written (=) in bf16: it is the gradient of both x and residual. dw (cols) fp32 is
// accumulated (+=) through a deterministic two-pass reduction in `workspace`. s is the forward's
// residual_out (or x when there was no residual).
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t cols);
cudaError_t rmsnorm_residual_backward(__nv_bfloat16* ds, float* dw, const __nv_bfloat16* dy,
                                      const __nv_bfloat16* dresidual, const __nv_bfloat16* s,
                                      const __nv_bfloat16* w, const float* rstd, int64_t rows,
                                      int64_t cols, void* workspace, size_t workspace_bytes,
                                      cudaStream_t stream);
#endif

}  // namespace deltatune
