// Gated RMSNorm of the Gated DeltaNet output ("norm before gate"), plain (not 1+w) weight:
//   y = w * (x * rstd) * silu(z),  rstd = 1 / sqrt(mean(x^2) + eps), per row of `cols` channels.
// Gradient contract: dx and dz are written (=), dw is accumulated (+=).
#pragma once
#include <cstddef>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

// out, x, z: (rows, cols); w: (cols); rstd: (rows), saved for backward.
template <typename T>
void gated_rmsnorm_forward_ref(T* out, T* rstd, const T* x, const T* z, const T* w, int64_t rows,
                               int64_t cols, T eps);
template <typename T>
void gated_rmsnorm_backward_ref(T* dx, T* dz, T* dw, const T* dout, const T* x, const T* z,
                                const T* w, const T* rstd, int64_t rows, int64_t cols);

#if DELTATUNE_HAVE_CUDA
// CUDA (device pointers, stream-ordered): x, z, out, dout, dx, dz: (rows, cols) bf16; w: (cols)
// bf16; rstd: (rows) fp32, saved for backward; dw: (cols) fp32, accumulated (+=) through a
// deterministic two-pass reduction in `workspace`. fp32 math, one warp per row.
bool gated_rmsnorm_supported(int64_t rows, int64_t cols);
cudaError_t gated_rmsnorm_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x,
                                  const __nv_bfloat16* z, const __nv_bfloat16* w, int64_t rows,
                                  int64_t cols, float eps, cudaStream_t stream);
size_t gated_rmsnorm_backward_workspace_bytes(int64_t rows, int64_t cols);
cudaError_t gated_rmsnorm_backward(__nv_bfloat16* dx, __nv_bfloat16* dz, float* dw,
                                   const __nv_bfloat16* dout, const __nv_bfloat16* x,
                                   const __nv_bfloat16* z, const __nv_bfloat16* w,
                                   const float* rstd, int64_t rows, int64_t cols, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream);
#endif

}  // namespace deltatune
