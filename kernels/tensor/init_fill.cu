// init_fill_f32: splitmix64 of (seed, stream id, element index), Box-Muller for the normal.
#include "kernels/tensor/init_fill.h"

namespace deltatune {

namespace {

__host__ __device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// (0, 1), never 0 (log-safe).
__device__ __forceinline__ float unit(uint32_t bits) {
    return (static_cast<float>(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

__global__ void init_fill_kernel(float* out, int64_t n, InitFill kind, float a, float b,
                                 uint64_t key, int64_t first) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const uint64_t h = splitmix64(key ^ splitmix64(static_cast<uint64_t>(first + i)));
        const float u1 = unit(static_cast<uint32_t>(h)), u2 = unit(static_cast<uint32_t>(h >> 32));
        float v = a;
        if (kind == InitFill::kNormal) {
            v = a * sqrtf(-2.0f * __logf(u1)) * __cosf(6.283185307f * u2);
        } else if (kind == InitFill::kLogUniform) {
            v = logf(a + (b - a) * u1);
        }
        out[i] = v;
    }
}

}  // namespace

cudaError_t init_fill_f32(float* out, int64_t n, InitFill kind, float a, float b, uint64_t seed,
                          uint64_t stream_id, cudaStream_t stream, int64_t first) {
    if (n <= 0) return cudaSuccess;
    const int threads = 256;
    const int64_t want = (n + threads - 1) / threads;
    const int blocks = static_cast<int>(want < 132 * 32 ? want : 132 * 32);
    const uint64_t key = splitmix64(seed * 0x2545F4914F6CDD1Dull + stream_id);
    init_fill_kernel<<<blocks, threads, 0, stream>>>(out, n, kind, a, b, key, first);
    return cudaGetLastError();
}

}  // namespace deltatune
