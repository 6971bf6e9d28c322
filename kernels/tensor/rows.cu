// The row gather: one block per output row, its threads copying 16 bytes at a time where the
// row allows it (a 5120-wide bf16 row is 640 such copies), else one element at a time.
#include "kernels/tensor/rows.h"

#include <cstdint>

#include "kernels/common/cuda_utils.cuh"

namespace deltatune {

namespace {

constexpr int kThreads = 128;

template <bool kVector>
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(__nv_bfloat16* out, const __nv_bfloat16* in, const int32_t* idx,
                       int64_t cols) {
    const int64_t i = blockIdx.x;
    const int32_t from = idx[i];
    if constexpr (kVector) {
        const int64_t units = cols / 8;
        auto* dst = reinterpret_cast<uint4*>(out + i * cols);
        const auto* src = reinterpret_cast<const uint4*>(in + int64_t{from} * cols);
        for (int64_t u = threadIdx.x; u < units; u += kThreads) {
            dst[u] = from >= 0 ? src[u] : make_uint4(0, 0, 0, 0);
        }
    } else {
        for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
            out[i * cols + c] = from >= 0 ? in[int64_t{from} * cols + c] : __float2bfloat16(0.0f);
        }
    }
}

}  // namespace

cudaError_t gather_rows(__nv_bfloat16* out, const __nv_bfloat16* in, const int32_t* idx, int64_t n,
                        int64_t cols, cudaStream_t stream) {
    if (n < 0 || cols < 0 || n > INT32_MAX) return cudaErrorInvalidValue;
    if (n == 0 || cols == 0) return cudaSuccess;
    const dim3 grid(static_cast<unsigned>(n));
    if (cols % 8 == 0 && cuda::aligned16(out) && cuda::aligned16(in)) {
        gather_rows_kernel<true><<<grid, kThreads, 0, stream>>>(out, in, idx, cols);
    } else {
        gather_rows_kernel<false><<<grid, kThreads, 0, stream>>>(out, in, idx, cols);
    }
    return cudaGetLastError();
}

}  // namespace deltatune
