// FP8 quantisation kernels. rows: a block per row reads it twice (the amax, then the quantised
// write; the second read hits L2), 8 values per thread through 16-byte loads where the row
// allows. transposed: a column-amax pass (atomicMax on the float bits, non-negative so ordered
// as integers), then 64 x 64 tiles through shared memory, each output row written as 4-byte
// words of consecutive input rows. Conversion: cvt.rn.satfinite (cuda_fp8.h), the reference's
// rounding.
#include <cuda_fp8.h>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/tensor/fp8.h"

namespace deltatune {

namespace {

constexpr int kRowThreads = 256;
constexpr int kTile = 64;          // transposed: input rows and columns per tile
constexpr int kAmaxRows = 256;     // transposed amax: input rows per block
constexpr int kAmaxThreads = 256;  // 64 column pairs x 4 row lanes

__device__ __forceinline__ __nv_fp8_interpretation_t kind(Fp8Format f) {
    return f == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
}

__device__ __forceinline__ uint8_t encode(float x, Fp8Format f) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind(f)));
}

// Four values as one word, the first in the lowest byte (two paired conversions).
__device__ __forceinline__ uint32_t encode4(float a, float b, float c, float d, Fp8Format f) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kind(f));
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, kind(f));
    return lo | hi << 16;
}

// kernels

__global__ void quantize_rows_kernel(uint8_t* out, float* dequant, const __nv_bfloat16* in,
                                     int64_t cols, Fp8Format f, bool vectorized) {
    __shared__ float partial[32];
    const int64_t r = blockIdx.x;
    const __nv_bfloat16* row = in + r * cols;
    uint8_t* dst = out + r * cols;
    float amax = 0.0f;
    if (vectorized) {
        for (int64_t c = threadIdx.x * 8; c < cols; c += kRowThreads * 8) {
            float x[8];
            cuda::load8(row + c, x);
            for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(x[j]));
        }
    } else {
        for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
            amax = fmaxf(amax, fabsf(__bfloat162float(row[c])));
        }
    }
    const float d = fp8_dequant_factor(cuda::block_max(amax, partial), f);
    const float scale = 1.0f / d;  // a power of two: exact
    if (threadIdx.x == 0) dequant[r] = d;
    if (vectorized) {
        for (int64_t c = threadIdx.x * 8; c < cols; c += kRowThreads * 8) {
            float x[8];
            cuda::load8(row + c, x);
            for (float& v : x) v *= scale;
            *reinterpret_cast<uint2*>(dst + c) =
                make_uint2(encode4(x[0], x[1], x[2], x[3], f), encode4(x[4], x[5], x[6], x[7], f));
        }
    } else {
        for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
            dst[c] = encode(__bfloat162float(row[c]) * scale, f);
        }
    }
}

// Block (x: 64 columns, y: kAmaxRows rows): the columns' amax over those rows into amax_bits.
__global__ void column_amax_kernel(unsigned* amax_bits, const __nv_bfloat16* in, int64_t rows,
                                   int64_t cols) {
    __shared__ float partial[kAmaxThreads / kTile][kTile];
    const int lane_col = threadIdx.x % kTile, lane_row = threadIdx.x / kTile;
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kTile + lane_col;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kAmaxRows;
    float amax = 0.0f;
    if (c < cols) {
        const int64_t r_end = min(rows, r0 + kAmaxRows);
        for (int64_t r = r0 + lane_row; r < r_end; r += kAmaxThreads / kTile) {
            amax = fmaxf(amax, fabsf(__bfloat162float(in[r * cols + c])));
        }
    }
    partial[lane_row][lane_col] = amax;
    __syncthreads();
    if (lane_row == 0 && c < cols) {
        for (int i = 1; i < kAmaxThreads / kTile; ++i) amax = fmaxf(amax, partial[i][lane_col]);
        atomicMax(&amax_bits[c], __float_as_uint(amax));  // non-negative: ordered as integers
    }
}

// Block (x: 64 input columns, y: 64 input rows, ld's padding included): the tile transposed and
// quantised with its columns' factors; blockIdx.y == 0 writes the factors.
__global__ void quantize_transposed_kernel(uint8_t* out, float* dequant, const unsigned* amax_bits,
                                           const __nv_bfloat16* in, int64_t rows, int64_t cols,
                                           int64_t ld, Fp8Format f) {
    __shared__ float tile[kTile][kTile + 1];
    __shared__ float scale[kTile];
    const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
    if (threadIdx.x < kTile) {
        const int64_t c = c0 + threadIdx.x;
        const float d = c < cols ? fp8_dequant_factor(__uint_as_float(amax_bits[c]), f) : 1.0f;
        scale[threadIdx.x] = 1.0f / d;
        if (blockIdx.y == 0 && c < cols) dequant[c] = d;
    }
    for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
        const int tr = i / kTile, tc = i % kTile;  // consecutive threads: consecutive columns
        const int64_t r = r0 + tr, c = c0 + tc;
        tile[tr][tc] = r < rows && c < cols ? __bfloat162float(in[r * cols + c]) : 0.0f;
    }
    __syncthreads();
    // Each thread writes 4 consecutive rows of one output row (input column) as one word.
    for (int i = threadIdx.x; i < kTile * kTile / 4; i += blockDim.x) {
        const int tc = i / (kTile / 4), tr = (i % (kTile / 4)) * 4;
        const int64_t c = c0 + tc, r = r0 + tr;
        if (c >= cols || r >= ld) continue;
        const float s = scale[tc];
        *reinterpret_cast<uint32_t*>(out + c * ld + r) = encode4(
            tile[tr][tc] * s, tile[tr + 1][tc] * s, tile[tr + 2][tc] * s, tile[tr + 3][tc] * s, f);
    }
}

}  // namespace

// launchers

cudaError_t quantize_rows_fp8(uint8_t* out, float* dequant, const __nv_bfloat16* in, int64_t rows,
                              int64_t cols, Fp8Format f, cudaStream_t stream) {
    if (rows == 0) return cudaSuccess;
    const bool vectorized = cols % 8 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(out) % 8 == 0;
    quantize_rows_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
        out, dequant, in, cols, f, vectorized);
    return cudaGetLastError();
}

cudaError_t quantize_transposed_fp8(uint8_t* out, float* dequant, float* amax_scratch,
                                    const __nv_bfloat16* in, int64_t rows, int64_t cols, int64_t ld,
                                    Fp8Format f, cudaStream_t stream) {
    if (ld < rows || ld % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 4 != 0) {
        return cudaErrorInvalidValue;
    }
    if (cols == 0 || ld == 0) return cudaSuccess;
    cudaError_t err =
        cudaMemsetAsync(amax_scratch, 0, static_cast<size_t>(cols) * sizeof(float), stream);
    if (err != cudaSuccess) return err;
    auto* bits = reinterpret_cast<unsigned*>(amax_scratch);
    const unsigned col_blocks = static_cast<unsigned>((cols + kTile - 1) / kTile);
    if (rows > 0) {
        const dim3 grid(col_blocks, static_cast<unsigned>((rows + kAmaxRows - 1) / kAmaxRows));
        column_amax_kernel<<<grid, kAmaxThreads, 0, stream>>>(bits, in, rows, cols);
        if ((err = cudaGetLastError()) != cudaSuccess) return err;
    }
    const dim3 grid(col_blocks, static_cast<unsigned>((ld + kTile - 1) / kTile));
    quantize_transposed_kernel<<<grid, 256, 0, stream>>>(out, dequant, bits, in, rows, cols, ld, f);
    return cudaGetLastError();
}

}  // namespace deltatune
