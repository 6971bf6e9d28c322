// Elementwise fp32 <-> bf16 casts: the runtime's device-side dtype conversion (uploading fp32
// master weights as bf16, reading bf16 activations back). Round to nearest even, NaN kept.
#pragma once

#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

// CPU references (bit patterns for bf16).
void cast_f32_to_bf16_ref(uint16_t* out, const float* in, int64_t n);
void cast_bf16_to_f32_ref(float* out, const uint16_t* in, int64_t n);

#if DELTATUNE_HAVE_CUDA
// Device pointers; any n >= 0 and any alignment. Returns the launch error, never synchronises.
cudaError_t cast_f32_to_bf16(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t stream);
cudaError_t cast_bf16_to_f32(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream);
#endif

}  // namespace deltatune
