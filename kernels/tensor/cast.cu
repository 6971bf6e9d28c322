// fp32 <-> bf16 cast kernels: a grid-stride loop, 4 elements per thread per iteration through
// 128-bit loads when the pointers allow it, scalar otherwise. Memory-bound by design.
#include "kernels/tensor/cast.h"

namespace deltatune {

namespace {

constexpr int kThreads = 256;

// kernels

__global__ void cast_f32_to_bf16_kernel(__nv_bfloat16* out, const float* in, int64_t n,
                                        bool vectorized) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (vectorized) {
        const int64_t n4 = n / 4;
        for (int64_t v = i; v < n4; v += stride) {
            const float4 x = reinterpret_cast<const float4*>(in)[v];
            __nv_bfloat162 lo = __floats2bfloat162_rn(x.x, x.y);
            __nv_bfloat162 hi = __floats2bfloat162_rn(x.z, x.w);
            reinterpret_cast<__nv_bfloat162*>(out)[2 * v] = lo;
            reinterpret_cast<__nv_bfloat162*>(out)[2 * v + 1] = hi;
        }
        i += n4 * 4;  // the tail starts after the vectorised part
    }
    for (; i < n; i += stride) out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void cast_bf16_to_f32_kernel(float* out, const __nv_bfloat16* in, int64_t n) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        out[i] = __bfloat162float(in[i]);
    }
}

int blocks_for(int64_t work) {
    const int64_t b = (work + kThreads - 1) / kThreads;
    return static_cast<int>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

}  // namespace

// launchers

cudaError_t cast_f32_to_bf16(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const bool vectorized =
        reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
    cast_f32_to_bf16_kernel<<<blocks_for(vectorized ? n / 4 + 1 : n), kThreads, 0, stream>>>(
        out, in, n, vectorized);
    return cudaGetLastError();
}

cudaError_t cast_bf16_to_f32(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    cast_bf16_to_f32_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n);
    return cudaGetLastError();
}

}  // namespace deltatune
