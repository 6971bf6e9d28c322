// q/k RMSNorm + partial RoPE: one warp per (token, head) row, each lane holding 8 consecutive
// channels (head_dim <= 256). The normalised row is staged in shared memory so a lane can read
// the channel its rotary partner sits in. Backward writes one row of dw partials per block
// (per-lane register accumulators, warps combined in fixed order) for the deterministic second
// pass.
#include "kernels/common/cuda_utils.cuh"
#include "kernels/qk_norm_rope.h"

namespace deltatune {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxRotaryDim = 64;  // one frequency per lane
constexpr int kBackwardRowsPerWarp = 16;
constexpr int kBackwardRowsPerBlock = kWarps * kBackwardRowsPerWarp;

struct RowGeom {
    int64_t tokens, heads, head_dim, rotary_dim;
    int64_t token_stride, head_stride;
    float theta;
};

__device__ __forceinline__ void load_row8(const __nv_bfloat16* p, bool vec, float (&f)[8]) {
    if (vec) {
        cuda::load8(p, f);
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) f[i] = __bfloat162float(p[i]);
    }
}

__device__ __forceinline__ void store_row8(__nv_bfloat16* p, bool vec, const float (&f)[8]) {
    if (vec) {
        cuda::store8(p, f);
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) p[i] = __float2bfloat16_rn(f[i]);
    }
}

// cos and sin of frequency `lane` (lanes >= rotary_dim / 2 get a dummy angle): each lane computes
// one angle per row and the others read it with a shuffle, so no lane evaluates more than one
// sincos. inv_freq follows transformers' fp32 recipe, 1 / theta^(2i / rotary_dim).
__device__ __forceinline__ void lane_angle(int pos, const float* inv_freq, const RowGeom& g,
                                           float& cs, float& sn) {
    const int lane = threadIdx.x & 31;
    const float freq = lane < g.rotary_dim / 2 ? static_cast<float>(pos) * inv_freq[lane] : 0.0f;
    sincosf(freq, &sn, &cs);
}

// Applies R (sign = +1) or R^T (sign = -1) to the row staged in `row`, for this lane's channels.
// Every lane of the warp must call it (shuffles).
__device__ __forceinline__ void rotate8(float (&v)[8], const float* row, int64_t c0, float cs_lane,
                                        float sn_lane, const RowGeom& g, float sign) {
    const int64_t half = g.rotary_dim / 2;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int64_t c = c0 + i;
        const int f = static_cast<int>(c < half ? c : c - half) & 31;
        const float cs = __shfl_sync(0xffffffffu, cs_lane, f);
        const float sn = sign * __shfl_sync(0xffffffffu, sn_lane, f);
        if (c < g.rotary_dim) {
            v[i] = c < half ? row[c] * cs - row[c + half] * sn : row[c] * cs + row[c - half] * sn;
        }
    }
}

// inv_freq for the block, computed once by the first warp.
__device__ __forceinline__ void fill_inv_freq(float* inv_freq, const RowGeom& g) {
    if (threadIdx.x < g.rotary_dim / 2) {
        const float exponent =
            static_cast<float>(2 * threadIdx.x) / static_cast<float>(g.rotary_dim);
        inv_freq[threadIdx.x] = 1.0f / powf(g.theta, exponent);
    }
    __syncthreads();
}

// kernels

__global__ void qk_norm_rope_forward_kernel(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x,
                                            const __nv_bfloat16* w, const int32_t* positions,
                                            RowGeom g, float eps, bool vec) {
    __shared__ float rows[kWarps][kMaxHeadDim];
    __shared__ float inv_freq[kMaxRotaryDim / 2];
    fill_inv_freq(inv_freq, g);
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    if (r >= g.tokens * g.heads) return;  // whole warp leaves together
    const int64_t t = r / g.heads;
    const int64_t h = r % g.heads;
    const int64_t c0 = static_cast<int64_t>(lane) * 8;
    const bool active = c0 < g.head_dim;
    float v[8] = {};
    float wv[8] = {};
    if (active) {
        load_row8(x + t * g.token_stride + h * g.head_stride + c0, vec, v);
        load_row8(w + c0, vec, wv);
    }
    float sum_sq = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) sum_sq += v[i] * v[i];
    sum_sq = cuda::warp_sum(sum_sq);
    const float rs = rsqrtf(sum_sq / static_cast<float>(g.head_dim) + eps);
    if (lane == 0) rstd[r] = rs;
    float* row = rows[warp];
    if (active) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            v[i] = v[i] * rs * (1.0f + wv[i]);
            row[c0 + i] = v[i];
        }
    }
    __syncwarp();
    float cs, sn;
    lane_angle(positions[t], inv_freq, g, cs, sn);
    rotate8(v, row, c0, cs, sn, g, 1.0f);
    if (active) store_row8(out + r * g.head_dim + c0, vec, v);
}

__global__ void qk_norm_rope_backward_kernel(__nv_bfloat16* dx, float* dw_partials,
                                             const __nv_bfloat16* dout, const __nv_bfloat16* x,
                                             const __nv_bfloat16* w, const float* rstd,
                                             const int32_t* positions, RowGeom g, bool vec) {
    __shared__ float rows[kWarps][kMaxHeadDim];
    __shared__ float warp_dw[kWarps][kMaxHeadDim];
    __shared__ float inv_freq[kMaxRotaryDim / 2];
    fill_inv_freq(inv_freq, g);
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int64_t c0 = static_cast<int64_t>(lane) * 8;
    const bool active = c0 < g.head_dim;
    float wv[8] = {};
    if (active) load_row8(w + c0, vec, wv);
    float dw_acc[8] = {};
    float* row = rows[warp];
    const int64_t n_rows = g.tokens * g.heads;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * kBackwardRowsPerBlock +
                          static_cast<int64_t>(warp) * kBackwardRowsPerWarp;
    for (int64_t r = first; r < min(n_rows, first + kBackwardRowsPerWarp); ++r) {
        const int64_t t = r / g.heads;
        const int64_t h = r % g.heads;
        float dy[8] = {};
        if (active) load_row8(dout + r * g.head_dim + c0, vec, dy);
        __syncwarp();  // the previous row's reads of `row` are done
        if (active) {
#pragma unroll
            for (int i = 0; i < 8; ++i) row[c0 + i] = dy[i];
        }
        __syncwarp();
        float gr[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) gr[i] = dy[i];
        float cs, sn;
        lane_angle(positions[t], inv_freq, g, cs, sn);
        rotate8(gr, row, c0, cs, sn, g, -1.0f);  // R^T dy
        float xv[8] = {};
        const int64_t off = t * g.token_stride + h * g.head_stride + c0;
        if (active) load_row8(x + off, vec, xv);
        const float rs = rstd[r];
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot += gr[i] * (1.0f + wv[i]) * (xv[i] * rs);
        const float mean = cuda::warp_sum(dot) / static_cast<float>(g.head_dim);
        if (active) {
            float d[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float xhat = xv[i] * rs;
                d[i] = rs * (gr[i] * (1.0f + wv[i]) - xhat * mean);
                dw_acc[i] += gr[i] * xhat;
            }
            store_row8(dx + off, vec, d);
        }
    }
    if (active) {
#pragma unroll
        for (int i = 0; i < 8; ++i) warp_dw[warp][c0 + i] = dw_acc[i];
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < g.head_dim; c += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < kWarps; ++k) s += warp_dw[k][c];
        dw_partials[static_cast<int64_t>(blockIdx.x) * g.head_dim + c] = s;
    }
}

RowGeom make_geom(int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim,
                  int64_t token_stride, int64_t head_stride, double theta) {
    RowGeom g;
    g.tokens = tokens;
    g.heads = heads;
    g.head_dim = head_dim;
    g.rotary_dim = rotary_dim;
    g.token_stride = token_stride;
    g.head_stride = head_stride;
    g.theta = static_cast<float>(theta);
    return g;
}

int backward_parts(int64_t tokens, int64_t heads) {
    return static_cast<int>((tokens * heads + kBackwardRowsPerBlock - 1) / kBackwardRowsPerBlock);
}

bool strides_vectorizable(const void* a, const void* b, const void* c, int64_t token_stride,
                          int64_t head_stride) {
    return cuda::aligned16(a) && cuda::aligned16(b) && cuda::aligned16(c) &&
           token_stride % 8 == 0 && head_stride % 8 == 0;
}

}  // namespace

// launchers

bool qk_norm_rope_supported(int64_t head_dim, int64_t rotary_dim) {
    return head_dim > 0 && head_dim % 8 == 0 && head_dim <= kMaxHeadDim && rotary_dim >= 0 &&
           rotary_dim % 2 == 0 && rotary_dim <= head_dim && rotary_dim <= kMaxRotaryDim;
}

cudaError_t qk_norm_rope_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x,
                                 int64_t x_token_stride, int64_t x_head_stride,
                                 const __nv_bfloat16* w, const int32_t* positions, int64_t tokens,
                                 int64_t heads, int64_t head_dim, int64_t rotary_dim, double theta,
                                 float eps, cudaStream_t stream) {
    if (!qk_norm_rope_supported(head_dim, rotary_dim)) return cudaErrorInvalidValue;
    const int64_t n_rows = tokens * heads;
    if (n_rows == 0) return cudaSuccess;
    const RowGeom g =
        make_geom(tokens, heads, head_dim, rotary_dim, x_token_stride, x_head_stride, theta);
    const bool vec = strides_vectorizable(out, x, w, x_token_stride, x_head_stride);
    const unsigned grid = static_cast<unsigned>((n_rows + kWarps - 1) / kWarps);
    qk_norm_rope_forward_kernel<<<grid, kWarps * 32, 0, stream>>>(out, rstd, x, w, positions, g,
                                                                  eps, vec);
    return cudaGetLastError();
}

size_t qk_norm_rope_backward_workspace_bytes(int64_t tokens, int64_t heads, int64_t head_dim) {
    return sizeof(float) * static_cast<size_t>(backward_parts(tokens, heads)) *
           static_cast<size_t>(head_dim);
}

cudaError_t qk_norm_rope_backward(__nv_bfloat16* dx, float* dw, const __nv_bfloat16* dout,
                                  const __nv_bfloat16* x, int64_t x_token_stride,
                                  int64_t x_head_stride, const __nv_bfloat16* w, const float* rstd,
                                  const int32_t* positions, int64_t tokens, int64_t heads,
                                  int64_t head_dim, int64_t rotary_dim, double theta,
                                  void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (!qk_norm_rope_supported(head_dim, rotary_dim)) return cudaErrorInvalidValue;
    if (tokens * heads == 0) return cudaSuccess;
    if (workspace_bytes < qk_norm_rope_backward_workspace_bytes(tokens, heads, head_dim)) {
        return cudaErrorInvalidValue;
    }
    const RowGeom g =
        make_geom(tokens, heads, head_dim, rotary_dim, x_token_stride, x_head_stride, theta);
    const bool vec =
        strides_vectorizable(dx, x, w, x_token_stride, x_head_stride) && cuda::aligned16(dout);
    const int parts = backward_parts(tokens, heads);
    auto* partials = static_cast<float*>(workspace);
    qk_norm_rope_backward_kernel<<<parts, kWarps * 32, 0, stream>>>(dx, partials, dout, x, w, rstd,
                                                                    positions, g, vec);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    return cuda::column_partials_accumulate(dw, partials, parts, static_cast<int>(head_dim),
                                            stream);
}

}  // namespace deltatune
