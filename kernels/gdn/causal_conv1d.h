// Depthwise causal conv1d + SiLU over packed documents (the Gated DeltaNet's q/k/v mixing):
//   out[t, c] = silu(sum_j w[c, j] * x[t - (K-1) + j, c]),
// where x before the start of t's document counts as 0, so the window never crosses a boundary.
// Gradient contract: dx is written (=), dw is accumulated (+=).
#pragma once
#include <cstddef>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

// x, out: (tokens, channels) token-major; w: (channels, K) (HF conv1d.weight [C, 1, K]);
// cu_seqlens: (num_docs + 1), tokens = cu_seqlens[num_docs].
template <typename T>
void causal_conv1d_forward_ref(T* out, const T* x, const T* w, const int32_t* cu_seqlens,
                               int64_t num_docs, int64_t channels, int64_t kernel);
template <typename T>
void causal_conv1d_backward_ref(T* dx, T* dw, const T* dout, const T* x, const T* w,
                                const int32_t* cu_seqlens, int64_t num_docs, int64_t channels,
                                int64_t kernel);

#if DELTATUNE_HAVE_CUDA
// CUDA (device pointers, stream-ordered): x, out, dout, dx: (tokens, channels) bf16; w: (channels,
// kernel) bf16; dw: (channels, kernel) fp32, accumulated (+=) through a deterministic two-pass
// reduction in `workspace`; cu_seqlens: (num_docs + 1) int32 on the device. fp32 math; the
// backward recomputes the pre-activation instead of saving it.
bool causal_conv1d_supported(int64_t tokens, int64_t channels, int64_t kernel);
cudaError_t causal_conv1d_forward(__nv_bfloat16* out, const __nv_bfloat16* x,
                                  const __nv_bfloat16* w, const int32_t* cu_seqlens,
                                  int64_t num_docs, int64_t tokens, int64_t channels,
                                  int64_t kernel, cudaStream_t stream);
size_t causal_conv1d_backward_workspace_bytes(int64_t tokens, int64_t channels, int64_t kernel);
cudaError_t causal_conv1d_backward(__nv_bfloat16* dx, float* dw, const __nv_bfloat16* dout,
                                   const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   const int32_t* cu_seqlens, int64_t num_docs, int64_t tokens,
                                   int64_t channels, int64_t kernel, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream);
#endif

}  // namespace deltatune
