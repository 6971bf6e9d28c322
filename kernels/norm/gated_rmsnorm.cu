// Gated RMSNorm (norm before the SiLU(z) gate), forward and backward, a warp per row at a time
// (rows are (token, value head) pairs of dv = 128 channels; at that width the forward's warps take
// four rows at once). The backward gives each block kRowsPerBlock
// rows; its warps keep dw partial sums in shared memory, summed in warp order into one row of
// partials per block for the deterministic column reduction.
#include "kernels/common/cuda_utils.cuh"
#include "kernels/norm/gated_rmsnorm.h"

namespace deltatune {

namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerBlock = 64;
constexpr int64_t kMaxCols = 1024;

using cuda::warp_sum;

using cuda::load4;
using cuda::store4;

__device__ __forceinline__ float sigmoidf(float x) {
    return 1.0f / (1.0f + __expf(-x));
}

// kernels

__global__ void gated_rmsnorm_forward_kernel(__nv_bfloat16* out, float* rstd,
                                             const __nv_bfloat16* x, const __nv_bfloat16* z,
                                             const __nv_bfloat16* w, int64_t rows, int cols,
                                             float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (row >= rows) return;
    const __nv_bfloat16* xr = x + row * cols;
    float ss = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        const float v = __bfloat162float(xr[c]);
        ss += v * v;
    }
    ss = warp_sum(ss);
    const float rs = rsqrtf(ss / static_cast<float>(cols) + eps);
    if (lane == 0) rstd[row] = rs;
    const __nv_bfloat16* zr = z + row * cols;
    __nv_bfloat16* yr = out + row * cols;
    for (int c = lane; c < cols; c += 32) {
        const float zv = __bfloat162float(zr[c]);
        const float y = __bfloat162float(w[c]) * (__bfloat162float(xr[c]) * rs) * zv * sigmoidf(zv);
        yr[c] = __float2bfloat16_rn(y);
    }
}

// The model's shape (128 columns, 8-byte aligned rows): each lane keeps 4 consecutive columns,
// and a warp takes kFwdRows rows with every load issued before the first use. A row at a time,
// one 2-byte load per use, the kernel waited out each load's latency (37% of the copy bandwidth).
constexpr int kFwdRows = 4;

__global__ void gated_rmsnorm_forward128_kernel(__nv_bfloat16* out, float* rstd,
                                                const __nv_bfloat16* x, const __nv_bfloat16* z,
                                                const __nv_bfloat16* w, int64_t rows, float eps) {
    constexpr int kCols = 128;
    const int lane = threadIdx.x & 31, c0 = lane * 4;
    const int64_t first =
        (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kFwdRows;
    uint2 xr[kFwdRows], zr[kFwdRows];
#pragma unroll
    for (int j = 0; j < kFwdRows; ++j) {
        const int64_t n = (first + j) * kCols + c0;
        const bool in = first + j < rows;
        xr[j] = in ? *reinterpret_cast<const uint2*>(x + n) : uint2{};
        zr[j] = in ? *reinterpret_cast<const uint2*>(z + n) : uint2{};
    }
    float wv[4];
    load4(w + c0, wv);
#pragma unroll
    for (int j = 0; j < kFwdRows; ++j) {
        const int64_t row = first + j;
        if (row >= rows) break;
        float xv[4], zv[4], y[4];
        cuda::unpack4(xr[j], xv);
        cuda::unpack4(zr[j], zv);
        const float ss = warp_sum(xv[0] * xv[0] + xv[1] * xv[1] + xv[2] * xv[2] + xv[3] * xv[3]);
        const float rs = rsqrtf(ss / static_cast<float>(kCols) + eps);
        if (lane == 0) rstd[row] = rs;
#pragma unroll
        for (int i = 0; i < 4; ++i) y[i] = wv[i] * (xv[i] * rs) * zv[i] * sigmoidf(zv[i]);
        store4(out + row * kCols + c0, y);
    }
}

__global__ void __launch_bounds__(kWarps * 32, 4)
    gated_rmsnorm_backward_kernel(__nv_bfloat16* dx, __nv_bfloat16* dz, float* dw_partials,
                                  const __nv_bfloat16* dout, const __nv_bfloat16* x,
                                  const __nv_bfloat16* z, const __nv_bfloat16* w, const float* rstd,
                                  int64_t rows, int cols, bool vec128) {
    extern __shared__ float dw_acc[];  // (kWarps, cols)
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    float* acc = dw_acc + warp * cols;
    for (int c = lane; c < cols; c += 32) acc[c] = 0.0f;
    const int64_t row_begin = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
    const int64_t row_end = min(rows, row_begin + kRowsPerBlock);
    if (vec128) {
        // The model's shape: each lane keeps 4 consecutive columns in registers through both
        // passes (8-byte loads and stores, nothing read twice) and its dw sums in registers. A
        // warp loads two rows before using either (one at a time left the copy bandwidth at
        // two thirds); dw still adds the rows in order.
        const int c0 = lane * 4;
        float wv[4], dw[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        load4(w + c0, wv);
        for (int64_t row0 = row_begin + warp; row0 < row_end; row0 += 2 * kWarps) {
            float rs[2], xv[2][4], zv[2][4], dy[2][4];
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                const int64_t row = row0 + k * kWarps;
                if (row >= row_end) break;
                rs[k] = rstd[row];
                load4(x + row * cols + c0, xv[k]);
                load4(z + row * cols + c0, zv[k]);
                load4(dout + row * cols + c0, dy[k]);
            }
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                const int64_t row = row0 + k * kWarps;
                if (row >= row_end) break;
                float h[4], dzv[4], dot = 0.0f;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float xhat = xv[k][i] * rs[k], sig = sigmoidf(zv[k][i]);
                    h[i] = dy[k][i] * zv[k][i] * sig * wv[i];
                    dot += h[i] * xhat;
                    dw[i] += dy[k][i] * zv[k][i] * sig * xhat;
                    dzv[i] = dy[k][i] * wv[i] * xhat * sig * (1.0f + zv[k][i] * (1.0f - sig));
                    xv[k][i] = xhat;
                }
                store4(dz + row * cols + c0, dzv);
                const float mean = warp_sum(dot) / static_cast<float>(cols);
#pragma unroll
                for (int i = 0; i < 4; ++i) h[i] = rs[k] * (h[i] - xv[k][i] * mean);
                store4(dx + row * cols + c0, h);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[c0 + i] = dw[i];
    }
    for (int64_t row = row_begin + warp; !vec128 && row < row_end; row += kWarps) {
        const float rs = rstd[row];
        const __nv_bfloat16* xr = x + row * cols;
        const __nv_bfloat16* zr = z + row * cols;
        const __nv_bfloat16* dyr = dout + row * cols;
        float dot = 0.0f;  // sum of h * xhat, h = dy * silu(z) * w
        for (int c = lane; c < cols; c += 32) {
            const float xhat = __bfloat162float(xr[c]) * rs;
            const float zv = __bfloat162float(zr[c]);
            const float sig = sigmoidf(zv);
            const float dy = __bfloat162float(dyr[c]);
            const float wv = __bfloat162float(w[c]);
            dot += dy * zv * sig * wv * xhat;
            acc[c] += dy * zv * sig * xhat;
            dz[row * cols + c] =
                __float2bfloat16_rn(dy * wv * xhat * sig * (1.0f + zv * (1.0f - sig)));
        }
        const float mean = warp_sum(dot) / static_cast<float>(cols);
        for (int c = lane; c < cols; c += 32) {
            const float xhat = __bfloat162float(xr[c]) * rs;
            const float zv = __bfloat162float(zr[c]);
            const float h = __bfloat162float(dyr[c]) * zv * sigmoidf(zv) * __bfloat162float(w[c]);
            dx[row * cols + c] = __float2bfloat16_rn(rs * (h - xhat * mean));
        }
    }
    __syncthreads();  // the sum below reads every warp's accumulator
    float* part = dw_partials + static_cast<int64_t>(blockIdx.x) * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < kWarps; ++k) s += dw_acc[k * cols + c];
        part[c] = s;
    }
}

int backward_parts(int64_t rows) {
    return static_cast<int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

// launchers

bool gated_rmsnorm_supported(int64_t rows, int64_t cols) {
    return rows >= 0 && rows < (int64_t{1} << 31) * kWarps && cols > 0 && cols <= kMaxCols;
}

cudaError_t gated_rmsnorm_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x,
                                  const __nv_bfloat16* z, const __nv_bfloat16* w, int64_t rows,
                                  int64_t cols, float eps, cudaStream_t stream) {
    if (!gated_rmsnorm_supported(rows, cols)) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    if (cols == 128 && cuda::vectorizable<4>(cols, {out, x, z, w})) {
        constexpr int64_t kBlockRows = kWarps * kFwdRows;
        const auto blocks = static_cast<unsigned>((rows + kBlockRows - 1) / kBlockRows);
        gated_rmsnorm_forward128_kernel<<<blocks, kWarps * 32, 0, stream>>>(out, rstd, x, z, w,
                                                                            rows, eps);
        return cudaGetLastError();
    }
    const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
    gated_rmsnorm_forward_kernel<<<blocks, kWarps * 32, 0, stream>>>(out, rstd, x, z, w, rows,
                                                                     static_cast<int>(cols), eps);
    return cudaGetLastError();
}

size_t gated_rmsnorm_backward_workspace_bytes(int64_t rows, int64_t cols) {
    return sizeof(float) * static_cast<size_t>(backward_parts(rows)) * static_cast<size_t>(cols);
}

cudaError_t gated_rmsnorm_backward(__nv_bfloat16* dx, __nv_bfloat16* dz, float* dw,
                                   const __nv_bfloat16* dout, const __nv_bfloat16* x,
                                   const __nv_bfloat16* z, const __nv_bfloat16* w,
                                   const float* rstd, int64_t rows, int64_t cols, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream) {
    if (!gated_rmsnorm_supported(rows, cols)) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    if (workspace_bytes < gated_rmsnorm_backward_workspace_bytes(rows, cols)) {
        return cudaErrorInvalidValue;
    }
    const int parts = backward_parts(rows);
    const size_t smem = sizeof(float) * kWarps * static_cast<size_t>(cols);
    auto* partials = static_cast<float*>(workspace);
    // 128 columns with 8-byte aligned rows: the register path (the model's shape).
    const bool vec128 = cols == 128 && cuda::vectorizable<4>(cols, {dx, dz, dout, x, z, w});
    gated_rmsnorm_backward_kernel<<<parts, kWarps * 32, smem, stream>>>(
        dx, dz, partials, dout, x, z, w, rstd, rows, static_cast<int>(cols), vec128);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    return cuda::column_partials_accumulate(dw, partials, parts, static_cast<int>(cols), stream);
}

}  // namespace deltatune
