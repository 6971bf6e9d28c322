// SwiGLU activation of the dense MLP: h = silu(gate) * up, elementwise.
// Gradient contract: dgate and dup are written (=).
#pragma once
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

template <typename T>
void swiglu_forward_ref(T* h, const T* gate, const T* up, int64_t n);
template <typename T>
void swiglu_backward_ref(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n);

#if DELTATUNE_HAVE_CUDA
// CUDA, bf16 in and out, fp32 math; device pointers, stream-ordered, any n and alignment.
cudaError_t swiglu_forward(__nv_bfloat16* h, const __nv_bfloat16* gate, const __nv_bfloat16* up,
                           int64_t n, cudaStream_t stream);
cudaError_t swiglu_backward(__nv_bfloat16* dgate, __nv_bfloat16* dup, const __nv_bfloat16* dh,
                            const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n,
                            cudaStream_t stream);
#endif

}  // namespace deltatune
