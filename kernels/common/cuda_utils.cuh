// Device helpers shared by the .cu files: warp/block sums, 16-byte bf16 packs, and the
// deterministic column-partial reduction used for weight gradients (dw += sum of per-block rows).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace deltatune::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `scratch` holds 32 floats; the fixed tree order makes it deterministic.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

// Eight bf16 values moved as one 16-byte access.
struct alignas(16) Bf16x8 {
    __nv_bfloat162 h[4];
};

__device__ __forceinline__ void unpack8(const Bf16x8& p, float (&f)[8]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 t = __bfloat1622float2(p.h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

__device__ __forceinline__ Bf16x8 pack8(const float (&f)[8]) {
    Bf16x8 p;
#pragma unroll
    for (int i = 0; i < 4; ++i) p.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return p;
}

__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[8]) {
    unpack8(*reinterpret_cast<const Bf16x8*>(p), f);
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&f)[8]) {
    *reinterpret_cast<Bf16x8*>(p) = pack8(f);
}

inline bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// dw[c] += sum over p of partials[p * cols + c]: the second, deterministic pass of every
// weight-gradient reduction (the first pass writes one row of partials per block). A block
// covers 32 columns with 32 rows of threads: thread row y sums parts y, y + 32, ... (coalesced
// 128-byte rows), then row 0 adds the 32 sums in order, so the result depends only on `parts`.
constexpr int kPartialsCols = 32, kPartialsRows = 32;

template <int kUnused = 0>
__global__ void column_partials_accumulate_kernel(float* dw, const float* partials, int parts,
                                                  int cols) {
    __shared__ float sums[kPartialsRows][kPartialsCols + 1];
    const int c = blockIdx.x * kPartialsCols + threadIdx.x;
    float s = 0.0f;
    if (c < cols) {
        for (int p = threadIdx.y; p < parts; p += kPartialsRows) {
            s += partials[static_cast<int64_t>(p) * cols + c];
        }
    }
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) return;
    float total = 0.0f;
    for (int y = 0; y < kPartialsRows; ++y) total += sums[y][threadIdx.x];
    dw[c] += total;
}

inline cudaError_t column_partials_accumulate(float* dw, const float* partials, int parts, int cols,
                                              cudaStream_t stream) {
    const dim3 block(kPartialsCols, kPartialsRows);
    column_partials_accumulate_kernel<<<(cols + kPartialsCols - 1) / kPartialsCols, block, 0,
                                        stream>>>(dw, partials, parts, cols);
    return cudaGetLastError();
}

}  // namespace deltatune::cuda
