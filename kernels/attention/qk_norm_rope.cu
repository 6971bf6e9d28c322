// q/k RMSNorm + partial RoPE: one warp per token, looping over its heads, each lane holding 8
// consecutive channels (head_dim <= 256). The rotation's cos/sin depend on the token only, so a
// warp evaluates one sincos per lane per token (not per head) and keeps them for all its heads
// (the forward: each lane's eight cos/sin in registers; the backward: the token's in shared
// memory); the next heads' loads are issued before the current head is processed.
// A lane reads the channel its rotary partner sits in by a shuffle (rotary_dim a multiple of 16)
// or through the row staged in shared memory. Backward writes one row of dw partials per block
// (per-lane register accumulators, warps combined in fixed order) for the deterministic second
// pass.
#include "kernels/attention/qk_norm_rope.h"
#include "kernels/common/cuda_utils.cuh"

namespace deltatune {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxRotaryDim = 64;  // one frequency per lane

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

// The cos and sin for this lane's channels c0 .. c0 + 7 at position `pos` (1 and 0 past
// rotary_dim): lane f evaluates frequency f (transformers' fp32 recipe, inv_freq = 1 /
// theta^(2f / rotary_dim)) and the others read it with shuffles. Every lane must call it.
struct LaneAngles {
    float cs[8], sn[8];
};

__device__ __forceinline__ LaneAngles lane_angles(int pos, float inv_freq, int64_t c0,
                                                  const RowGeom& g) {
    float cs_f, sn_f;
    sincosf(static_cast<float>(pos) * inv_freq, &sn_f, &cs_f);
    const int64_t half = g.rotary_dim / 2;
    LaneAngles a;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int64_t c = c0 + i;
        const int f = static_cast<int>(c < half ? c : c - half) & 31;
        a.cs[i] = __shfl_sync(0xffffffffu, cs_f, f);
        a.sn[i] = __shfl_sync(0xffffffffu, sn_f, f);
        if (c >= g.rotary_dim) a.cs[i] = 1.0f, a.sn[i] = 0.0f;
    }
    return a;
}

__device__ __forceinline__ float lane_inv_freq(const RowGeom& g) {
    const int lane = threadIdx.x & 31;
    if (lane >= g.rotary_dim / 2) return 0.0f;
    return 1.0f / powf(g.theta, static_cast<float>(2 * lane) / static_cast<float>(g.rotary_dim));
}

// Applies R (sign = +1) or R^T (sign = -1) to the row staged in `row`, for this lane's channels.
__device__ __forceinline__ void rotate8(float (&v)[8], const float* row, int64_t c0,
                                        const LaneAngles& a, const RowGeom& g, float sign) {
    const int64_t half = g.rotary_dim / 2;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int64_t c = c0 + i;
        if (c < g.rotary_dim) {
            const float partner = c < half ? -row[c + half] : row[c - half];
            v[i] = row[c] * a.cs[i] + partner * sign * a.sn[i];
        }
    }
}

// v <- R v (sign = +1) or R^T v (sign = -1) for this lane's channels. When rotary_dim is a
// multiple of 16 (Qwen3.5's 64) a channel's partner sits in the lane rotary_dim / 16 away at the
// same slot, so one shuffle per value does; otherwise the row is staged in `row` (this warp's
// shared-memory row). Every lane must call it.
__device__ __forceinline__ void rotate_row(float (&v)[8], float* row, int64_t c0, bool active,
                                           const LaneAngles& a, const RowGeom& g, float sign) {
    if (g.rotary_dim % 16 == 0) {
        const int lane = threadIdx.x & 31;
        const int half_lanes = static_cast<int>(g.rotary_dim / 16);
        const int partner = lane < half_lanes ? lane + half_lanes : lane - half_lanes;
        float p[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) p[i] = __shfl_sync(0xffffffffu, v[i], partner & 31);
        if (lane < 2 * half_lanes) {
            const float s = lane < half_lanes ? -sign : sign;
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = v[i] * a.cs[i] + p[i] * s * a.sn[i];
        }
        return;
    }
    __syncwarp();  // the previous row's reads of `row` are done
    if (active) {
#pragma unroll
        for (int i = 0; i < 8; ++i) row[c0 + i] = v[i];
    }
    __syncwarp();
    rotate8(v, row, c0, a, g, sign);
}

// What a lane needs for all heads of one token: its channels of the norm weight and the
// rotation's cos/sin at the token's position.
struct TokenConsts {
    float wv[8];
    LaneAngles a;
};

__device__ __forceinline__ TokenConsts token_consts(const __nv_bfloat16* w, int pos, int64_t c0,
                                                    bool active, bool vec, const RowGeom& g) {
    TokenConsts k{};
    if (active) load_row8(w + c0, vec, k.wv);
    k.a = lane_angles(pos, lane_inv_freq(g), c0, g);
    return k;
}

// The backward keeps the token's cos/sin in shared memory rather than in 16 registers per lane:
// its 80 registers then hold everything else without spilling (faster; capped at 64 registers
// for a 4th block per SM it spilled and was slower: docs/performance.md "Measured choices").
// angles: the cos of channels [0, rotary_dim), then their sin. Every lane must call fill_angles.
__device__ __forceinline__ void fill_angles(float* angles, int pos, const RowGeom& g) {
    const int lane = threadIdx.x & 31;
    const int64_t half = g.rotary_dim / 2;
    if (lane < half) {
        float cs, sn;
        sincosf(static_cast<float>(pos) * lane_inv_freq(g), &sn, &cs);
        angles[lane] = angles[lane + half] = cs;
        angles[g.rotary_dim + lane] = angles[g.rotary_dim + lane + half] = sn;
    }
    __syncwarp();
}

__device__ __forceinline__ LaneAngles read_angles(const float* angles, int64_t c0,
                                                  const RowGeom& g) {
    LaneAngles a;
    if (c0 + 8 <= g.rotary_dim && g.rotary_dim % 4 == 0) {  // 16-byte aligned runs
        const float4* cs = reinterpret_cast<const float4*>(angles + c0);
        const float4* sn = reinterpret_cast<const float4*>(angles + g.rotary_dim + c0);
        const float4 c_lo = cs[0], c_hi = cs[1], s_lo = sn[0], s_hi = sn[1];
        a = {{c_lo.x, c_lo.y, c_lo.z, c_lo.w, c_hi.x, c_hi.y, c_hi.z, c_hi.w},
             {s_lo.x, s_lo.y, s_lo.z, s_lo.w, s_hi.x, s_hi.y, s_hi.z, s_hi.w}};
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int64_t c = c0 + i;
            a.cs[i] = c < g.rotary_dim ? angles[c] : 1.0f;
            a.sn[i] = c < g.rotary_dim ? angles[g.rotary_dim + c] : 0.0f;
        }
    }
    return a;
}

// Rows of a warp's token staged through a ring of kStages shared-memory slots by cp.async: each
// lane copies and later reads back its own 16 bytes, so kStages - 1 heads are in flight ahead of
// the one being processed without holding registers (the memory system needs that many bytes in
// flight; one row per warp reached 37% of the copy ceiling). Scalar rows (unaligned strides) are
// read directly instead.
constexpr int kStages = 4;
static_assert((kStages & (kStages - 1)) == 0, "ring slots are picked with a mask");

struct RowRing {
    const __nv_bfloat16* src;  // this lane's channels of head 0
    int64_t head_stride;
    __nv_bfloat16* slots;  // this warp's ring, kStages x kMaxHeadDim
    int heads, c0;
    bool use;  // vectorised and this lane holds channels

    __device__ __forceinline__ __nv_bfloat16* slot(int h) const {
        return slots + (h & (kStages - 1)) * kMaxHeadDim + c0;
    }
    // Issues head h's copy (if any) and commits a group either way, so group counts stay aligned.
    __device__ __forceinline__ void issue(int h) const {
        if (use && h < heads) cuda::cp_async16(slot(h), src + h * head_stride);
        cuda::cp_async_commit();
    }
    __device__ __forceinline__ void prologue() const {
#pragma unroll
        for (int h = 0; h < kStages - 1; ++h) issue(h);
    }
    // Head h's values (its copy must have landed).
    __device__ __forceinline__ void read(int h, bool active, float (&v)[8]) const {
        if (!active) return;
        if (use) {
            cuda::load8(slot(h), v);
        } else {
            load_row8(src + h * head_stride, false, v);
        }
    }
    // Head h's values, once its copy landed; issues head h + kStages - 1 first.
    __device__ __forceinline__ void next(int h, bool active, float (&v)[8]) const {
        issue(h + kStages - 1);
        cuda::cp_async_wait<kStages - 1>();
        read(h, active, v);
    }
};

// kernels

__global__ void __launch_bounds__(kWarps * 32, 4)
    qk_norm_rope_forward_kernel(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x,
                                const __nv_bfloat16* w, const int32_t* positions, RowGeom g,
                                float eps, bool vec) {
    __shared__ float rows[kWarps][kMaxHeadDim];
    __shared__ __align__(16) __nv_bfloat16 ring[kWarps][kStages * kMaxHeadDim];
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    if (t >= g.tokens) return;  // whole warp leaves together
    const int64_t c0 = static_cast<int64_t>(lane) * 8;
    const bool active = c0 < g.head_dim;
    const RowRing xs{x + t * g.token_stride + c0, g.head_stride,        ring[warp],
                     static_cast<int>(g.heads),   static_cast<int>(c0), vec && active};
    xs.prologue();
    const TokenConsts k = token_consts(w, positions[t], c0, active, vec, g);
    float* row = rows[warp];
    for (int h = 0; h < g.heads; ++h) {
        float v[8] = {};
        xs.next(h, active, v);
        float sum_sq = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) sum_sq += v[i] * v[i];
        sum_sq = cuda::warp_sum(sum_sq);
        const float rs = rsqrtf(sum_sq / static_cast<float>(g.head_dim) + eps);
        const int64_t r = t * g.heads + h;
        if (lane == 0) rstd[r] = rs;
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = v[i] * rs * (1.0f + k.wv[i]);
        rotate_row(v, row, c0, active, k.a, g, 1.0f);
        if (active) store_row8(out + r * g.head_dim + c0, vec, v);
    }
}

__global__ void __launch_bounds__(kWarps * 32, 3)
    qk_norm_rope_backward_kernel(__nv_bfloat16* dx, float* dw_partials, const __nv_bfloat16* dout,
                                 const __nv_bfloat16* x, const __nv_bfloat16* w, const float* rstd,
                                 const int32_t* positions, RowGeom g, bool vec) {
    // 44 KB of static shared memory in all: the rows (each warp's reused for its dw at the end),
    // the cos/sin, and the dy and x rings.
    __shared__ float rows[kWarps][kMaxHeadDim];
    __shared__ __align__(16) float angles[kWarps][2 * kMaxRotaryDim];
    __shared__ __align__(16) __nv_bfloat16 dy_ring[kWarps][kStages * kMaxHeadDim];
    __shared__ __align__(16) __nv_bfloat16 x_ring[kWarps][kStages * kMaxHeadDim];
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int64_t c0 = static_cast<int64_t>(lane) * 8;
    const bool active = c0 < g.head_dim;
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
    float dw_acc[8] = {};
    if (t < g.tokens) {  // warp-uniform; every warp reaches the block barrier below
        const int heads = static_cast<int>(g.heads);
        const int64_t xt = t * g.token_stride + c0;  // x and dx share the strides
        const RowRing dys{dout + t * g.heads * g.head_dim + c0,
                          g.head_dim,
                          dy_ring[warp],
                          heads,
                          static_cast<int>(c0),
                          vec && active};
        const RowRing xs{x + xt, g.head_stride,        x_ring[warp],
                         heads,  static_cast<int>(c0), vec && active};
        dys.prologue();
        xs.prologue();
        // Instruction issue bounds this loop (ncu: the schedulers issued on 76% of cycles with
        // DRAM at 63%), so per-row work is kept to what the math needs: 1 + w once per token,
        // R^T only on the rotary lanes, shared products, 32-bit indices.
        float w1[8] = {};
        if (active) {
            load_row8(w + c0, vec, w1);
#pragma unroll
            for (int i = 0; i < 8; ++i) w1[i] += 1.0f;
        }
        fill_angles(angles[warp], positions[t], g);
        const bool by_shuffle = g.rotary_dim % 16 == 0;
        const int half_lanes = static_cast<int>(g.rotary_dim / 16);
        const int partner = (lane < half_lanes ? lane + half_lanes : lane - half_lanes) & 31;
        const bool rotary_lane = lane < 2 * half_lanes;
        const float rsign = lane < half_lanes ? 1.0f : -1.0f;  // R^T: the partner's sign
        const float* rstd_t = rstd + t * g.heads;
        const float inv_dim = 1.0f / static_cast<float>(g.head_dim);
        float* row = rows[warp];
        for (int h = 0; h < heads; ++h) {
            float dy[8] = {}, xv[8] = {};
            // dy's group for head h is older than x's two newest, so x's wait covers both.
            dys.issue(h + kStages - 1);
            xs.next(h, active, xv);
            dys.read(h, active, dy);
            const float rs = rstd_t[h];
            float gr[8];  // R^T dy
            if (by_shuffle) {
                float p[8];
#pragma unroll
                for (int i = 0; i < 8; ++i) p[i] = __shfl_sync(0xffffffffu, dy[i], partner);
                if (rotary_lane) {  // c0 + 8 <= rotary_dim: 16-byte runs of the angles
                    const float4* cs4 = reinterpret_cast<const float4*>(angles[warp] + c0);
                    const float4* sn4 =
                        reinterpret_cast<const float4*>(angles[warp] + g.rotary_dim + c0);
                    const float4 c_lo = cs4[0], c_hi = cs4[1], s_lo = sn4[0], s_hi = sn4[1];
                    const float cs[8] = {c_lo.x, c_lo.y, c_lo.z, c_lo.w,
                                         c_hi.x, c_hi.y, c_hi.z, c_hi.w};
                    const float sn[8] = {s_lo.x, s_lo.y, s_lo.z, s_lo.w,
                                         s_hi.x, s_hi.y, s_hi.z, s_hi.w};
#pragma unroll
                    for (int i = 0; i < 8; ++i) gr[i] = dy[i] * cs[i] + p[i] * (rsign * sn[i]);
                } else {
#pragma unroll
                    for (int i = 0; i < 8; ++i) gr[i] = dy[i];
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) gr[i] = dy[i];
                rotate_row(gr, row, c0, active, read_angles(angles[warp], c0, g), g, -1.0f);
            }
            float xhat[8], gw[8], dot = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                xhat[i] = xv[i] * rs;
                gw[i] = gr[i] * w1[i];
                dot += gw[i] * xhat[i];
            }
            const float mean = cuda::warp_sum(dot) * inv_dim;
            if (active) {
                float d[8];
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    d[i] = rs * (gw[i] - xhat[i] * mean);
                    dw_acc[i] += gr[i] * xhat[i];
                }
                store_row8(dx + xt + h * g.head_stride, vec, d);
            }
        }
    }
    __syncwarp();  // this warp's last reads of its row are done
    if (active) {
#pragma unroll
        for (int i = 0; i < 8; ++i) rows[warp][c0 + i] = dw_acc[i];
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < g.head_dim; c += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < kWarps; ++k) s += rows[k][c];
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

// Both kernels run a block per kWarps tokens; the backward writes a row of dw partials per block.
int token_blocks(int64_t tokens) {
    return static_cast<int>((tokens + kWarps - 1) / kWarps);
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
    const unsigned grid = static_cast<unsigned>(token_blocks(tokens));
    qk_norm_rope_forward_kernel<<<grid, kWarps * 32, 0, stream>>>(out, rstd, x, w, positions, g,
                                                                  eps, vec);
    return cudaGetLastError();
}

size_t qk_norm_rope_backward_workspace_bytes(int64_t tokens, int64_t heads, int64_t head_dim) {
    return sizeof(float) * static_cast<size_t>(token_blocks(tokens)) *
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
    const int parts = token_blocks(tokens);
    auto* partials = static_cast<float*>(workspace);
    qk_norm_rope_backward_kernel<<<parts, kWarps * 32, 0, stream>>>(dx, partials, dout, x, w, rstd,
                                                                    positions, g, vec);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    return cuda::column_partials_accumulate(dw, partials, parts, static_cast<int>(head_dim),
                                            stream);
}

}  // namespace deltatune
