// Generic gated varlen attention (see attention_generic.h). Forward: one block per (query, head),
// keys in tiles of kTile, online softmax. Backward: dO and its row dot first, then dq per
// (query, head) and dk/dv per (key, kv head) summing over the group's heads and later queries,
// each in a fixed order.
#include "kernels/attention/attention_generic.h"
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/varlen.cuh"

namespace deltatune {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kTile = 128;  // keys (or queries) per tile = threads per block
constexpr int kMaxD = 256;
constexpr int kPer = kMaxD / kTile;  // head channels owned by each thread

struct Geom {
    const int32_t* cu;
    int64_t D, T, Hq, Hkv, D_, gts, ghs;
    float scale;
};

__device__ __forceinline__ float dot_sb(const float* s, const bf16* g, int64_t n) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n; ++i) acc += s[i] * __bfloat162float(g[i]);
    return acc;
}

__device__ __forceinline__ float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

__global__ void forward_kernel(bf16* y, bf16* o, float* lse, GatedAttentionArgs a, Geom g) {
    __shared__ float qs[kMaxD], p[kTile], scratch[32];
    const int64_t t = blockIdx.x, h = blockIdx.y, hk = h / (g.Hq / g.Hkv);
    const int64_t s0 = g.cu[cuda::doc_of(g.cu, g.D, t)];
    const int64_t D = g.D_;
    for (int64_t d = threadIdx.x; d < D; d += kTile)
        qs[d] = __bfloat162float(a.q[(t * g.Hq + h) * D + d]);
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc[kPer] = {};
    for (int64_t j0 = s0; j0 <= t; j0 += kTile) {
        const int64_t j = j0 + threadIdx.x;
        const float s = j <= t ? dot_sb(qs, a.k + (j * g.Hkv + hk) * D, D) * g.scale : -INFINITY;
        const float m_new = fmaxf(m, cuda::block_max(s, scratch));
        const float e = j <= t ? expf(s - m_new) : 0.0f;
        const float corr = expf(m - m_new);
        __syncthreads();
        p[threadIdx.x] = e;
        l = l * corr + cuda::block_sum(e, scratch);
        m = m_new;
        const int64_t n = t - j0 + 1 < kTile ? t - j0 + 1 : kTile;
        for (int r = 0; r < kPer; ++r) {
            const int64_t d = threadIdx.x + r * kTile;
            if (d >= D) continue;
            float s2 = 0.0f;
            for (int64_t jj = 0; jj < n; ++jj)
                s2 += p[jj] * __bfloat162float(a.v[((j0 + jj) * g.Hkv + hk) * D + d]);
            acc[r] = acc[r] * corr + s2;
        }
    }
    for (int r = 0; r < kPer; ++r) {
        const int64_t d = threadIdx.x + r * kTile;
        if (d >= D) continue;
        const float ov = acc[r] / l;
        const float gv = __bfloat162float(a.gate[t * g.gts + h * g.ghs + d]);
        o[(t * g.Hq + h) * D + d] = __float2bfloat16(ov);
        y[(t * g.Hq + h) * D + d] = __float2bfloat16(ov * sigmoid(gv));
    }
    if (threadIdx.x == 0) lse[t * g.Hq + h] = m + logf(l);
}

// dO = dy * sigmoid(gate), dgate = dy * o * sigmoid'(gate), delta = dO . o; one block per row.
__global__ void prep_kernel(float* dO, float* delta, bf16* dgate, const bf16* dy, const bf16* o,
                            GatedAttentionArgs a, Geom g) {
    __shared__ float scratch[32];
    const int64_t t = blockIdx.x, h = blockIdx.y, row = t * g.Hq + h;
    float part = 0.0f;
    for (int64_t d = threadIdx.x; d < g.D_; d += kTile) {
        const float gv = __bfloat162float(a.gate[t * g.gts + h * g.ghs + d]);
        const float sg = sigmoid(gv), dyv = __bfloat162float(dy[row * g.D_ + d]);
        const float ov = __bfloat162float(o[row * g.D_ + d]);
        dO[row * g.D_ + d] = dyv * sg;
        dgate[t * g.gts + h * g.ghs + d] = __float2bfloat16(dyv * ov * sg * (1.0f - sg));
        part += dyv * sg * ov;
    }
    part = cuda::block_sum(part, scratch);
    if (threadIdx.x == 0) delta[row] = part;
}

__global__ void dq_kernel(bf16* dq, const float* dO, const float* delta, const float* lse,
                          GatedAttentionArgs a, Geom g) {
    __shared__ float qs[kMaxD], dos[kMaxD], ds[kTile];
    const int64_t t = blockIdx.x, h = blockIdx.y, hk = h / (g.Hq / g.Hkv), row = t * g.Hq + h;
    const int64_t s0 = g.cu[cuda::doc_of(g.cu, g.D, t)], D = g.D_;
    for (int64_t d = threadIdx.x; d < D; d += kTile) {
        qs[d] = __bfloat162float(a.q[row * D + d]);
        dos[d] = dO[row * D + d];
    }
    __syncthreads();
    float acc[kPer] = {};
    for (int64_t j0 = s0; j0 <= t; j0 += kTile) {
        const int64_t j = j0 + threadIdx.x;
        float v = 0.0f;
        if (j <= t) {
            const float pr = expf(dot_sb(qs, a.k + (j * g.Hkv + hk) * D, D) * g.scale - lse[row]);
            v = pr * (dot_sb(dos, a.v + (j * g.Hkv + hk) * D, D) - delta[row]);
        }
        __syncthreads();
        ds[threadIdx.x] = v;
        __syncthreads();
        const int64_t n = t - j0 + 1 < kTile ? t - j0 + 1 : kTile;
        for (int r = 0; r < kPer; ++r) {
            const int64_t d = threadIdx.x + r * kTile;
            if (d >= D) continue;
            for (int64_t jj = 0; jj < n; ++jj)
                acc[r] += ds[jj] * __bfloat162float(a.k[((j0 + jj) * g.Hkv + hk) * D + d]);
        }
    }
    for (int r = 0; r < kPer; ++r) {
        const int64_t d = threadIdx.x + r * kTile;
        if (d < D) dq[row * D + d] = __float2bfloat16(acc[r] * g.scale);
    }
}

__global__ void dkv_kernel(bf16* dk, bf16* dv, const float* dO, const float* delta,
                           const float* lse, GatedAttentionArgs a, Geom g) {
    __shared__ float ks[kMaxD], vs[kMaxD], pp[kTile], ds[kTile];
    const int64_t j = blockIdx.x, hk = blockIdx.y, G = g.Hq / g.Hkv, D = g.D_;
    const int64_t e = g.cu[cuda::doc_of(g.cu, g.D, j) + 1];
    for (int64_t d = threadIdx.x; d < D; d += kTile) {
        ks[d] = __bfloat162float(a.k[(j * g.Hkv + hk) * D + d]);
        vs[d] = __bfloat162float(a.v[(j * g.Hkv + hk) * D + d]);
    }
    __syncthreads();
    float adk[kPer] = {}, adv[kPer] = {};
    for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        for (int64_t i0 = j; i0 < e; i0 += kTile) {
            const int64_t i = i0 + threadIdx.x;
            float pv = 0.0f, dsv = 0.0f;
            if (i < e) {
                const int64_t row = i * g.Hq + h;
                pv = expf(dot_sb(ks, a.q + row * D, D) * g.scale - lse[row]);
                float dp = 0.0f;
                for (int64_t d = 0; d < D; ++d) dp += dO[row * D + d] * vs[d];
                dsv = pv * (dp - delta[row]);
            }
            __syncthreads();
            pp[threadIdx.x] = pv;
            ds[threadIdx.x] = dsv;
            __syncthreads();
            const int64_t n = e - i0 < kTile ? e - i0 : kTile;
            for (int r = 0; r < kPer; ++r) {
                const int64_t d = threadIdx.x + r * kTile;
                if (d >= D) continue;
                for (int64_t ii = 0; ii < n; ++ii) {
                    const int64_t row = (i0 + ii) * g.Hq + h;
                    adv[r] += pp[ii] * dO[row * D + d];
                    adk[r] += ds[ii] * __bfloat162float(a.q[row * D + d]);
                }
            }
        }
    }
    for (int r = 0; r < kPer; ++r) {
        const int64_t d = threadIdx.x + r * kTile;
        if (d >= D) continue;
        dk[(j * g.Hkv + hk) * D + d] = __float2bfloat16(adk[r] * g.scale);
        dv[(j * g.Hkv + hk) * D + d] = __float2bfloat16(adv[r]);
    }
}

Geom geom_of(const GatedAttentionArgs& a) {
    return {a.cu_seqlens, a.num_docs,          a.tokens,           a.q_heads, a.kv_heads,
            a.head_dim,   a.gate_token_stride, a.gate_head_stride, a.scale};
}

dim3 grid_of(int64_t rows, int64_t heads) {
    return dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads));
}

}  // namespace

bool gated_attention_generic_supported(const GatedAttentionArgs& a) {
    return a.head_dim > 0 && a.head_dim <= kMaxD && a.q_heads > 0 && a.kv_heads > 0 &&
           a.q_heads % a.kv_heads == 0 && a.q_heads <= 65535 && a.num_docs > 0 && a.tokens >= 0 &&
           a.tokens < (int64_t{1} << 31) && a.q && a.k && a.v && a.gate && a.cu_seqlens;
}

cudaError_t gated_attention_forward_generic(bf16* y, bf16* o, float* lse,
                                            const GatedAttentionArgs& a, cudaStream_t stream) {
    if (!gated_attention_generic_supported(a)) return cudaErrorInvalidValue;
    if (a.tokens == 0) return cudaSuccess;
    forward_kernel<<<grid_of(a.tokens, a.q_heads), kTile, 0, stream>>>(y, o, lse, a, geom_of(a));
    return cudaGetLastError();
}

size_t gated_attention_backward_generic_workspace_bytes(const GatedAttentionArgs& a) {
    return sizeof(float) * static_cast<size_t>(a.tokens * a.q_heads * (a.head_dim + 1));
}

cudaError_t gated_attention_backward_generic(bf16* dq, bf16* dk, bf16* dv, bf16* dgate,
                                             const bf16* dy, const bf16* o, const float* lse,
                                             const GatedAttentionArgs& a, void* workspace,
                                             size_t workspace_bytes, cudaStream_t stream) {
    if (!gated_attention_generic_supported(a) ||
        workspace_bytes < gated_attention_backward_generic_workspace_bytes(a)) {
        return cudaErrorInvalidValue;
    }
    if (a.tokens == 0) return cudaSuccess;
    auto* dO = static_cast<float*>(workspace);
    float* delta = dO + a.tokens * a.q_heads * a.head_dim;
    const Geom g = geom_of(a);
    prep_kernel<<<grid_of(a.tokens, a.q_heads), kTile, 0, stream>>>(dO, delta, dgate, dy, o, a, g);
    dq_kernel<<<grid_of(a.tokens, a.q_heads), kTile, 0, stream>>>(dq, dO, delta, lse, a, g);
    dkv_kernel<<<grid_of(a.tokens, a.kv_heads), kTile, 0, stream>>>(dk, dv, dO, delta, lse, a, g);
    return cudaGetLastError();
}

}  // namespace deltatune
