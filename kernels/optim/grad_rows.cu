// Marking and zeroing gradient rows (see grad_rows.h). A step's embedding backward touches a few
// thousand of an embedding's ~250k rows: zeroing only those replaces a memset of the whole
// gradient (5 GB at the 27B shape), and the marks let the gradient norm and AdamW skip the rest.
#include "kernels/optim/grad_rows.h"

#include <algorithm>

namespace deltatune {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// kernels

__global__ void mark_rows_kernel(uint8_t* touched, const int32_t* ids, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) touched[ids[i]] = 1;  // racing writes all store 1
}

// A warp per row, grid-stride: most rows are unmarked, so a warp mostly reads one byte.
__global__ void zero_marked_rows_kernel(float* grad, uint8_t* touched, int64_t rows,
                                        int64_t row_len, bool vec) {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
    for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; r < rows;
         r += warps) {
        if (!touched[r]) continue;  // the same for the whole warp
        float* row = grad + r * row_len;
        if (vec) {
            for (int64_t i = lane; i < row_len / 4; i += 32) {
                reinterpret_cast<float4*>(row)[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        } else {
            for (int64_t i = lane; i < row_len; i += 32) row[i] = 0.0f;
        }
        __syncwarp();  // every lane has read the mark
        if (lane == 0) touched[r] = 0;
    }
}

__global__ void set_marked_rows_kernel(int32_t* dst, const uint8_t* touched, int64_t rows,
                                       int32_t value) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r < rows && touched[r]) dst[r] = value;
}

}  // namespace

// launchers

cudaError_t mark_rows(uint8_t* touched, const int32_t* ids, int64_t n, cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    mark_rows_kernel<<<blocks, kThreads, 0, stream>>>(touched, ids, n);
    return cudaGetLastError();
}

cudaError_t zero_marked_rows(float* grad, uint8_t* touched, int64_t rows, int64_t row_len,
                             cudaStream_t stream) {
    if (rows < 0 || row_len < 0) return cudaErrorInvalidValue;
    if (rows == 0 || row_len == 0) return cudaSuccess;
    const bool vec = row_len % 4 == 0 && reinterpret_cast<uintptr_t>(grad) % 16 == 0;
    const int64_t blocks = std::min<int64_t>((rows + kWarps - 1) / kWarps, 4096);
    zero_marked_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        grad, touched, rows, row_len, vec);
    return cudaGetLastError();
}

cudaError_t set_marked_rows(int32_t* dst, const uint8_t* touched, int64_t rows, int32_t value,
                            cudaStream_t stream) {
    if (rows < 0) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    const auto blocks = static_cast<unsigned>((rows + kThreads - 1) / kThreads);
    set_marked_rows_kernel<<<blocks, kThreads, 0, stream>>>(dst, touched, rows, value);
    return cudaGetLastError();
}

}  // namespace deltatune
