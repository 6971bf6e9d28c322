// Zero-centred RMSNorm fused with the residual add, forward and backward. One block per row
// (forward) or per fixed group of rows (backward, which also writes one row of dw partials per
// block for the deterministic second pass). 16-byte accesses when cols % 8 == 0 and pointers
// allow; scalar otherwise.

#include "kernels/common/cuda_utils.cuh"
#include "kernels/norm/rmsnorm.h"

namespace deltatune {

namespace {

constexpr int kBackwardRowsPerBlock = 16;  // 8: slower (more partials)
constexpr int64_t kMaxCols = 32768;  // backward keeps a (cols) fp32 dw accumulator in shared memory

using cuda::block_sum;

using cuda::load_vec;
using cuda::store_vec;

template <int V>
__device__ __forceinline__ void round_bf16(float (&f)[V]) {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = __bfloat162float(__float2bfloat16_rn(f[i]));
}

// kernels

template <int V>
__global__ void rmsnorm_residual_forward_kernel(__nv_bfloat16* y, __nv_bfloat16* residual_out,
                                                float* rstd, const __nv_bfloat16* x,
                                                const __nv_bfloat16* residual,
                                                const __nv_bfloat16* w, int64_t cols, float eps) {
    __shared__ float scratch[32];
    const int64_t row = blockIdx.x;
    const __nv_bfloat16* xr = x + row * cols;
    const __nv_bfloat16* rr = residual ? residual + row * cols : nullptr;
    __nv_bfloat16* outr = residual ? residual_out + row * cols : nullptr;
    float sum_sq = 0.0f;
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < cols; c += blockDim.x * V) {
        float s[V];
        load_vec<V>(xr + c, s);
        if (rr) {
            float r[V];
            load_vec<V>(rr + c, r);
#pragma unroll
            for (int i = 0; i < V; ++i) s[i] += r[i];
            round_bf16<V>(s);
            store_vec<V>(outr + c, s);
        }
#pragma unroll
        for (int i = 0; i < V; ++i) sum_sq += s[i] * s[i];
    }
    sum_sq = block_sum(sum_sq, scratch);
    const float rs = rsqrtf(sum_sq / static_cast<float>(cols) + eps);
    if (threadIdx.x == 0) rstd[row] = rs;
    // Second pass: each thread rereads exactly the elements it wrote (its own stores are visible).
    const __nv_bfloat16* sr = rr ? outr : xr;
    __nv_bfloat16* yr = y + row * cols;
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < cols; c += blockDim.x * V) {
        float s[V], wv[V];
        load_vec<V>(sr + c, s);
        load_vec<V>(w + c, wv);
#pragma unroll
        for (int i = 0; i < V; ++i) s[i] = s[i] * rs * (1.0f + wv[i]);
        store_vec<V>(yr + c, s);
    }
}

template <int V>
__global__ void rmsnorm_residual_backward_kernel(__nv_bfloat16* ds, float* dw_partials,
                                                 const __nv_bfloat16* dy,
                                                 const __nv_bfloat16* dresidual,
                                                 const __nv_bfloat16* s, const __nv_bfloat16* w,
                                                 const float* rstd, int64_t rows, int64_t cols) {
    // dw accumulator, (V, cols / V): element i of vector v at [i * vecs + v], so that a warp's
    // lanes (consecutive v) hit consecutive banks. Every thread touches only its own vectors'
    // entries, so no barrier guards it.
    extern __shared__ float dw_acc[];
    __shared__ float scratch[32];
    const int64_t vecs = cols / V;
    for (int64_t v = threadIdx.x; v < vecs; v += blockDim.x) {
#pragma unroll
        for (int i = 0; i < V; ++i) dw_acc[i * vecs + v] = 0.0f;
    }
    const int64_t row_begin = static_cast<int64_t>(blockIdx.x) * kBackwardRowsPerBlock;
    const int64_t row_end = min(rows, row_begin + kBackwardRowsPerBlock);
    for (int64_t row = row_begin; row < row_end; ++row) {
        const float rs = rstd[row];
        const __nv_bfloat16* dyr = dy + row * cols;
        const __nv_bfloat16* sr = s + row * cols;
        float dot = 0.0f;  // sum over columns of dy * (1 + w) * xhat
        for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < cols; c += blockDim.x * V) {
            float g[V], xv[V], wv[V];
            load_vec<V>(dyr + c, g);
            load_vec<V>(sr + c, xv);
            load_vec<V>(w + c, wv);
#pragma unroll
            for (int i = 0; i < V; ++i) dot += g[i] * (1.0f + wv[i]) * (xv[i] * rs);
        }
        const float mean = block_sum(dot, scratch) / static_cast<float>(cols);
        __nv_bfloat16* dsr = ds + row * cols;
        const __nv_bfloat16* drr = dresidual ? dresidual + row * cols : nullptr;
        for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < cols; c += blockDim.x * V) {
            float g[V], xv[V], wv[V], out[V];
            load_vec<V>(dyr + c, g);
            load_vec<V>(sr + c, xv);
            load_vec<V>(w + c, wv);
            float dr[V];
            if (drr) {
                load_vec<V>(drr + c, dr);
            } else {
#pragma unroll
                for (int i = 0; i < V; ++i) dr[i] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < V; ++i) {
                const float xhat = xv[i] * rs;
                out[i] = rs * (g[i] * (1.0f + wv[i]) - xhat * mean) + dr[i];
                dw_acc[i * vecs + c / V] += g[i] * xhat;
            }
            store_vec<V>(dsr + c, out);
        }
    }
    float* part = dw_partials + static_cast<int64_t>(blockIdx.x) * cols;
    for (int64_t v = threadIdx.x; v < vecs; v += blockDim.x) {
#pragma unroll
        for (int i = 0; i < V; ++i) part[v * V + i] = dw_acc[i * vecs + v];
    }
}

int backward_parts(int64_t rows) {
    return static_cast<int>((rows + kBackwardRowsPerBlock - 1) / kBackwardRowsPerBlock);
}

}  // namespace

// launchers

bool rmsnorm_supported(int64_t rows, int64_t cols) {
    return rows >= 0 && rows <= (int64_t{1} << 31) - 1 && cols > 0 && cols <= kMaxCols;
}

cudaError_t rmsnorm_residual_forward(__nv_bfloat16* y, __nv_bfloat16* residual_out, float* rstd,
                                     const __nv_bfloat16* x, const __nv_bfloat16* residual,
                                     const __nv_bfloat16* w, int64_t rows, int64_t cols, float eps,
                                     cudaStream_t stream) {
    if (!rmsnorm_supported(rows, cols)) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    const bool vec = cuda::vectorizable<8>(cols, {y, residual_out, x, residual, w});
    auto* kernel = vec ? rmsnorm_residual_forward_kernel<8> : rmsnorm_residual_forward_kernel<1>;
    kernel<<<static_cast<unsigned>(rows), cuda::row_threads(vec ? cols / 8 : cols), 0, stream>>>(
        y, residual_out, rstd, x, residual, w, cols, eps);
    return cudaGetLastError();
}

size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t cols) {
    return sizeof(float) * static_cast<size_t>(backward_parts(rows)) * static_cast<size_t>(cols);
}

cudaError_t rmsnorm_residual_backward(__nv_bfloat16* ds, float* dw, const __nv_bfloat16* dy,
                                      const __nv_bfloat16* dresidual, const __nv_bfloat16* s,
                                      const __nv_bfloat16* w, const float* rstd, int64_t rows,
                                      int64_t cols, void* workspace, size_t workspace_bytes,
                                      cudaStream_t stream) {
    if (!rmsnorm_supported(rows, cols)) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    if (workspace_bytes < rmsnorm_backward_workspace_bytes(rows, cols)) {
        return cudaErrorInvalidValue;
    }
    const int parts = backward_parts(rows);
    const size_t smem = sizeof(float) * static_cast<size_t>(cols);
    auto* partials = static_cast<float*>(workspace);
    const bool vec = cuda::vectorizable<8>(cols, {ds, dy, dresidual, s, w});
    auto* kernel = vec ? rmsnorm_residual_backward_kernel<8> : rmsnorm_residual_backward_kernel<1>;
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem));
        e != cudaSuccess) {
        return e;
    }
    kernel<<<parts, cuda::row_threads(vec ? cols / 8 : cols), smem, stream>>>(
        ds, partials, dy, dresidual, s, w, rstd, rows, cols);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    return cuda::column_partials_accumulate(dw, partials, parts, static_cast<int>(cols), stream);
}

}  // namespace deltatune
