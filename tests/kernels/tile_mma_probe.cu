// One block runs mm on the case's operands in shared memory (see tile_mma_probe.h).
#include <utility>

#include "kernels/common/tile_mma.cuh"
#include "tests/kernels/tile_mma_probe.h"

namespace deltatune::cudatest {
namespace {

constexpr int kThreads = 256;

__device__ void copy_in(float* dst, const float* src, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

template <int kCase>
__global__ void tile_mma_kernel(const float* a, const float* b, float* c, float alpha, float beta) {
    constexpr TileMmaCase x = kTileMmaCases[kCase];
    constexpr int kA = ((x.op_a & 1) ? x.k : x.m) * x.lda;
    constexpr int kB = ((x.op_b & 1) ? x.n : x.k) * x.ldb;
    constexpr int kCn = x.m * x.ldc;
    extern __shared__ __align__(16) float smem[];
    float* sa = smem;
    float* sb = sa + kA;
    float* sc = sb + kB;
    copy_in(sa, a, kA);
    copy_in(sb, b, kB);
    copy_in(sc, c, kCn);
    __syncthreads();
    cuda::mm<x.op_a, x.op_b, x.m, x.n, x.k, x.lda, x.ldb, x.ldc, kThreads / 32, x.big_tile_div, 0,
             x.round_c>(sc, sa, sb, alpha, beta);
    __syncthreads();
    for (int i = threadIdx.x; i < kCn; i += blockDim.x) c[i] = sc[i];
}

template <int kCase>
cudaError_t launch(const float* a, const float* b, float* c, float alpha, float beta) {
    constexpr TileMmaCase x = kTileMmaCases[kCase];
    constexpr size_t bytes = sizeof(float) * (((x.op_a & 1) ? x.k : x.m) * x.lda +
                                              ((x.op_b & 1) ? x.n : x.k) * x.ldb + x.m * x.ldc);
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
cudaError_t dispatch(int index, std::integer_sequence<int, kCases...>, const float* a,
                     const float* b, float* c, float alpha, float beta) {
    cudaError_t e = cudaErrorInvalidValue;
    ((index == kCases ? (e = launch<kCases>(a, b, c, alpha, beta), 0) : 0), ...);
    return e;
}

}  // namespace

cudaError_t run_tile_mma_case(int index, const float* a, const float* b, float* c, float alpha,
                              float beta) {
    return dispatch(index, std::make_integer_sequence<int, kTileMmaCaseCount>{}, a, b, c, alpha,
                    beta);
}

}  // namespace deltatune::cudatest
