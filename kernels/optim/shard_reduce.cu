#include "kernels/optim/shard_reduce.h"

namespace deltatune {

namespace {

__global__ void accumulate_kernel(float* y, const float* x, int64_t n) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    int64_t head = 0;  // elements done as float4 (both pointers 16-byte aligned)
    if ((reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(x)) % 16 == 0) {
        const int64_t n4 = n / 4;
        for (int64_t j = t; j < n4; j += stride) {
            float4 a = reinterpret_cast<float4*>(y)[j];
            const float4 b = reinterpret_cast<const float4*>(x)[j];
            a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
            reinterpret_cast<float4*>(y)[j] = a;
        }
        head = n4 * 4;
    }
    for (int64_t i = head + t; i < n; i += stride) y[i] += x[i];
}

__global__ void square_sum_kernel(float* out, const float* a, const float* b) {
    const float x = *a, y = b ? *b : 0.0f;
    *out = x * x + y * y;
}

__global__ void from_square_kernel(float* norm, float* clip_coef, const float* sum_sq,
                                   float max_norm) {
    const float n = sqrtf(*sum_sq);
    *norm = n;
    if (clip_coef) *clip_coef = max_norm > 0 ? fminf(1.0f, max_norm / (n + 1e-6f)) : 1.0f;
}

}  // namespace

cudaError_t accumulate_f32(float* y, const float* x, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const int threads = 256;
    const int64_t want = (n / 4 + threads) / threads;
    const int blocks = static_cast<int>(want < 132 * 8 ? want : 132 * 8);
    accumulate_kernel<<<blocks, threads, 0, stream>>>(y, x, n);
    return cudaGetLastError();
}

cudaError_t grad_norm_square_sum(float* out, const float* a, const float* b, cudaStream_t stream) {
    square_sum_kernel<<<1, 1, 0, stream>>>(out, a, b);
    return cudaGetLastError();
}

cudaError_t grad_norm_from_square(float* norm, float* clip_coef, const float* sum_sq,
                                  float max_norm, cudaStream_t stream) {
    from_square_kernel<<<1, 1, 0, stream>>>(norm, clip_coef, sum_sq, max_norm);
    return cudaGetLastError();
}

}  // namespace deltatune
