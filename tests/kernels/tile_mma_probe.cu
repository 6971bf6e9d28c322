// One block runs mm or mm_bf16 on the case's operands in shared memory (see
// tile_mma_probe.h).
#include <cuda_bf16.h>

#include <type_traits>
#include <utility>

#include "kernels/common/tile_mma.cuh"
#include "tests/kernels/tile_mma_probe.h"

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
    using TA = std::conditional_t<x.operands != kFp32Operands, __nv_bfloat16, float>;
    using TB = std::conditional_t<x.operands == kBf16Operands, __nv_bfloat16, float>;
    constexpr int kA = stored_a(x), kB = stored_b(x), kCn = stored_c(x);
    extern __shared__ __align__(16) float smem[];
    float* sc = smem;
    TA* sa = reinterpret_cast<TA*>(sc + kCn);
    TB* sb = reinterpret_cast<TB*>(sa + kA);
    copy_in(sa, static_cast<const TA*>(a), kA);
    copy_in(sb, static_cast<const TB*>(b), kB);
    copy_in(sc, c, kCn);
    __syncthreads();
    if constexpr (x.operands == kBf16Operands) {
        cuda::mm_bf16<x.op_a, x.op_b, x.m, x.n, x.k, x.lda, x.ldb, x.ldc, kThreads / 32,
                      x.big_tile_div>(sc, sa, sb, alpha, beta);
    } else {
        cuda::mm<x.op_a, x.op_b, x.m, x.n, x.k, x.lda, x.ldb, x.ldc, kThreads / 32, x.big_tile_div,
                 0, x.round_c>(sc, sa, sb, alpha, beta);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kCn; i += blockDim.x) c[i] = sc[i];
}

template <int kCase>
cudaError_t launch(const void* a, const void* b, float* c, float alpha, float beta) {
    constexpr TileMmaCase x = kTileMmaCases[kCase];
    constexpr size_t a_size = x.operands != kFp32Operands ? 2 : 4;
    constexpr size_t b_size = x.operands == kBf16Operands ? 2 : 4;  // C is fp32
    constexpr size_t bytes =
        a_size * stored_a(x) + b_size * stored_b(x) + sizeof(float) * stored_c(x);
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
