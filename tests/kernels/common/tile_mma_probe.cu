// One block runs mm_bf16 on the case's operands in shared memory (see tile_mma_probe.h).
#include <cuda_bf16.h>

#include <utility>

#include "kernels/common/tile_mma.cuh"
#include "tests/kernels/common/tile_mma_probe.h"

namespace deltatune::cudatest {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ void copy_in(T* dst, const T* src, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

template <int kCase>
__global__ void tile_mma_kernel(const void* a, const void* b, float* c, float alpha, float beta) {
    constexpr TileMmaCase x = kTileMmaCases[kCase];
    constexpr int kA = stored_a(x), kB = stored_b(x), kCn = stored_c(x);
    extern __shared__ __align__(16) float smem[];
    float* sc = smem;
    auto* sa = reinterpret_cast<__nv_bfloat16*>(sc + kCn);
    __nv_bfloat16* sb = sa + kA;
    copy_in(sa, static_cast<const __nv_bfloat16*>(a), kA);
    copy_in(sb, static_cast<const __nv_bfloat16*>(b), kB);
    copy_in(sc, c, kCn);
    __syncthreads();
    cuda::mm_bf16<x.op_a, x.op_b, x.m, x.n, x.k, x.lda, x.ldb, x.ldc, kThreads / 32,
                  x.big_tile_div>(sc, sa, sb, alpha, beta);
    __syncthreads();
    for (int i = threadIdx.x; i < kCn; i += blockDim.x) c[i] = sc[i];
}

template <int kCase>
cudaError_t launch(const void* a, const void* b, float* c, float alpha, float beta) {
    constexpr TileMmaCase x = kTileMmaCases[kCase];
    constexpr size_t bytes = sizeof(__nv_bfloat16) * (stored_a(x) + stored_b(x)) +
                             sizeof(float) * stored_c(x);  // C (fp32) first, 16-byte aligned
    if (cudaError_t e = cudaFuncSetAttribute(tile_mma_kernel<kCase>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        e != cudaSuccess) {
        return e;
    }
    tile_mma_kernel<kCase><<<1, kThreads, bytes>>>(a, b, c, alpha, beta);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    return cudaDeviceSynchronize();
}

template <int... kCases>
cudaError_t dispatch(int index, std::integer_sequence<int, kCases...>, const void* a, const void* b,
                     float* c, float alpha, float beta) {
    cudaError_t e = cudaErrorInvalidValue;
    ((index == kCases ? (e = launch<kCases>(a, b, c, alpha, beta), 0) : 0), ...);
    return e;
}

}  // namespace

cudaError_t run_tile_mma_case(int index, const void* a, const void* b, float* c, float alpha,
                              float beta) {
    return dispatch(index, std::make_integer_sequence<int, kTileMmaCaseCount>{}, a, b, c, alpha,
                    beta);
}

}  // namespace deltatune::cudatest
