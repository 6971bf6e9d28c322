// Reference-grade CUDA kernels of the Gated DeltaNet core (see gdn_simple.h): one thread per
// element for the pointwise ops, one warp per row for the norms, one block per channel / head /
// column for the deterministic weight-gradient sums, one block per (document, value head) for
// the token-by-token delta rule.
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/varlen.cuh"
#include "kernels/gdn/gdn_simple.h"

namespace deltatune {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
// Delta-rule backward: states are checkpointed every kStretch tokens; inside a stretch the state
// before each token is recomputed from the checkpoint (kStretch / 2 extra steps per token).
constexpr int64_t kStretch = 16;
constexpr int64_t kMaxHeadDim = 256;

unsigned blocks_for(int64_t n, int per_block = kThreads) {
    return static_cast<unsigned>((n + per_block - 1) / per_block);
}

__device__ __forceinline__ float softplusf(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

// ---------------------------------------------------------------------------------------------
// kernels

__device__ float conv_pre(const bf16* x, const float* w, int64_t t, int64_t start, int64_t c,
                          int64_t C, int64_t K) {
    float acc = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - (K - 1) + j;
        if (src >= start) acc += w[c * K + j] * __bfloat162float(x[src * C + c]);
    }
    return acc;
}

__global__ void conv_forward_kernel(float* out, const bf16* x, const float* w, const int32_t* cu,
                                    int64_t D, int64_t T, int64_t C, int64_t K) {
    const int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    if (n >= T * C) return;
    const int64_t t = n / C, c = n % C;
    const float p = conv_pre(x, w, t, cu[cuda::doc_of(cu, D, t)], c, C, K);
    out[n] = p / (1.0f + expf(-p));
}

__device__ float conv_dpre(const float* dout, const bf16* x, const float* w, int64_t t,
                           int64_t start, int64_t c, int64_t C, int64_t K) {
    const float p = conv_pre(x, w, t, start, c, C, K);
    const float s = 1.0f / (1.0f + expf(-p));
    return dout[t * C + c] * s * (1.0f + p * (1.0f - s));
}

__global__ void conv_backward_dx_kernel(bf16* dx, const float* dout, const bf16* x, const float* w,
                                        const int32_t* cu, int64_t D, int64_t T, int64_t C,
                                        int64_t K) {
    const int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    if (n >= T * C) return;
    const int64_t t = n / C, c = n % C;
    const int64_t d = cuda::doc_of(cu, D, t);
    const int64_t start = cu[d], end = cu[d + 1];
    float acc = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
        const int64_t out_t = t + (K - 1) - j;  // the output that reads x[t] through tap j
        if (out_t < end) acc += conv_dpre(dout, x, w, out_t, start, c, C, K) * w[c * K + j];
    }
    dx[n] = __float2bfloat16(acc);
}

// One block per channel: dw[c, j] += sum_t dpre[t, c] * x[t - (K-1) + j, c], in a fixed order.
__global__ void conv_backward_dw_kernel(float* dw, const float* dout, const bf16* x, const float* w,
                                        const int32_t* cu, int64_t D, int64_t T, int64_t C,
                                        int64_t K) {
    __shared__ float scratch[32];
    const int64_t c = blockIdx.x;
    float part[8] = {};
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
        const int64_t start = cu[cuda::doc_of(cu, D, t)];
        const float g = conv_dpre(dout, x, w, t, start, c, C, K);
        for (int64_t j = 0; j < K; ++j) {
            const int64_t src = t - (K - 1) + j;
            if (src >= start) part[j] += g * __bfloat162float(x[src * C + c]);
        }
    }
    for (int64_t j = 0; j < K; ++j) {
        const float s = cuda::block_sum(part[j], scratch);
        if (threadIdx.x == 0) dw[c * K + j] += s;
    }
}

// One warp per (token, head) row.
__global__ void l2norm_forward_kernel(float* out, float* rnorm, const float* x, int64_t xs,
                                      int64_t rows, int64_t heads, int64_t dim, float eps) {
    const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float* xr = x + (r / heads) * xs + (r % heads) * dim;
    float ss = 0.0f;
    for (int64_t i = lane; i < dim; i += 32) ss += xr[i] * xr[i];
    const float rn = 1.0f / sqrtf(cuda::warp_sum(ss) + eps);
    for (int64_t i = lane; i < dim; i += 32) out[r * dim + i] = xr[i] * rn;
    if (lane == 0) rnorm[r] = rn;
}

__global__ void l2norm_backward_kernel(float* dx, int64_t dxs, const float* dout, const float* y,
                                       const float* rnorm, int64_t rows, int64_t heads,
                                       int64_t dim) {
    const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float* dy = dout + r * dim;
    const float* yr = y + r * dim;
    float dot = 0.0f;
    for (int64_t i = lane; i < dim; i += 32) dot += yr[i] * dy[i];
    dot = cuda::warp_sum(dot);
    float* dxr = dx + (r / heads) * dxs + (r % heads) * dim;
    for (int64_t i = lane; i < dim; i += 32) dxr[i] = rnorm[r] * (dy[i] - yr[i] * dot);
}

__global__ void gates_forward_kernel(float* beta, float* g, const bf16* b, const bf16* a,
                                     const float* A_log, const float* dt_bias, int64_t T,
                                     int64_t H) {
    const int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    if (n >= T * H) return;
    const int64_t h = n % H;
    beta[n] = 1.0f / (1.0f + expf(-__bfloat162float(b[n])));
    g[n] = -expf(A_log[h]) * softplusf(__bfloat162float(a[n]) + dt_bias[h]);
}

// One block per head.
__global__ void gates_backward_kernel(bf16* db, bf16* da, float* dA_log, float* ddt_bias,
                                      const float* dbeta, const float* dg, const bf16* b,
                                      const bf16* a, const float* A_log, const float* dt_bias,
                                      int64_t T, int64_t H) {
    __shared__ float scratch[32];
    const int64_t h = blockIdx.x;
    const float decay = expf(A_log[h]);
    float sum_da = 0.0f, sum_dA = 0.0f;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
        const int64_t n = t * H + h;
        const float beta = 1.0f / (1.0f + expf(-__bfloat162float(b[n])));
        db[n] = __float2bfloat16(dbeta[n] * beta * (1.0f - beta));
        const float x = __bfloat162float(a[n]) + dt_bias[h];
        const float dsp = x > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-x));
        const float dan = dg[n] * (-decay) * dsp;
        da[n] = __float2bfloat16(dan);
        sum_da += dan;
        sum_dA += dg[n] * (-decay * softplusf(x));
    }
    sum_da = cuda::block_sum(sum_da, scratch);
    sum_dA = cuda::block_sum(sum_dA, scratch);
    if (threadIdx.x == 0) {
        ddt_bias[h] += sum_da;
        dA_log[h] += sum_dA;
    }
}

struct RuleGeom {
    int64_t Hk, Hv, dk, dv, vs;
    float scale;
};

// Loads k and scale * q of token t for value head h into shared memory (all threads call it).
__device__ __forceinline__ void load_qk(float* ks, float* qs, const GdnRuleArgs& a,
                                        const RuleGeom& g, int64_t t, int64_t h) {
    const int64_t kh = h / (g.Hv / g.Hk);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < g.dk; i += blockDim.x) {
        ks[i] = a.k[(t * g.Hk + kh) * g.dk + i];
        qs[i] = a.q[(t * g.Hk + kh) * g.dk + i] * g.scale;
    }
    __syncthreads();
}

// One recurrence step on column j of S (thread j < dv); returns o_j.
__device__ __forceinline__ float rule_step(float* S, const float* ks, const float* qs,
                                           const GdnRuleArgs& a, const RuleGeom& g, int64_t t,
                                           int64_t h, int64_t j) {
    const float decay = expf(a.g[t * g.Hv + h]);
    const float beta = a.beta[t * g.Hv + h];
    float p = 0.0f;
    for (int64_t i = 0; i < g.dk; ++i) {
        const float s = S[i * g.dv + j] * decay;
        S[i * g.dv + j] = s;
        p += s * ks[i];
    }
    const float delta = beta * (a.v[t * g.vs + h * g.dv + j] - p);
    float o = 0.0f;
    for (int64_t i = 0; i < g.dk; ++i) {
        const float s = S[i * g.dv + j] + ks[i] * delta;
        S[i * g.dv + j] = s;
        o += s * qs[i];
    }
    return o;
}

__global__ void rule_forward_kernel(float* out, GdnRuleArgs a, RuleGeom g, float* states) {
    __shared__ float ks[kMaxHeadDim], qs[kMaxHeadDim];
    const int64_t d = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    float* S = states + (d * g.Hv + h) * g.dk * g.dv;
    if (j < g.dv)
        for (int64_t i = 0; i < g.dk; ++i) S[i * g.dv + j] = 0.0f;
    for (int64_t t = a.cu_seqlens[d]; t < a.cu_seqlens[d + 1]; ++t) {
        load_qk(ks, qs, a, g, t, h);
        if (j < g.dv) out[(t * g.Hv + h) * g.dv + j] = rule_step(S, ks, qs, a, g, t, h, j);
    }
}

__global__ void rule_backward_kernel(float* dqv, float* dkv, float* dv_out, float* dg_out,
                                     float* dbeta_out, const float* dout, GdnRuleArgs a, RuleGeom g,
                                     float* states, float* ckpt) {
    __shared__ float ks[kMaxHeadDim], qs[kMaxHeadDim], scratch[32];
    // Per-warp partial row sums (at most kMaxHeadDim threads, so kMaxHeadDim / 32 warps).
    __shared__ float red1[kMaxHeadDim / 32][kMaxHeadDim], red2[kMaxHeadDim / 32][kMaxHeadDim];
    const int64_t d = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const bool col = j < g.dv;
    const int64_t start = a.cu_seqlens[d], L = a.cu_seqlens[d + 1] - start;
    const int64_t n = g.dk * g.dv;
    float* S = states + (d * g.Hv + h) * 2 * n;
    float* dS = S + n;
    const int64_t slot0 = start / kStretch + d;  // see gdn_rule_backward_simple_workspace_bytes
    auto ck = [&](int64_t c) { return ckpt + ((slot0 + c) * g.Hv + h) * n; };

    if (col)
        for (int64_t i = 0; i < g.dk; ++i) S[i * g.dv + j] = 0.0f;
    for (int64_t u = 0; u < L; ++u) {
        if (u % kStretch == 0 && col)
            for (int64_t i = 0; i < g.dk; ++i) ck(u / kStretch)[i * g.dv + j] = S[i * g.dv + j];
        load_qk(ks, qs, a, g, start + u, h);
        if (col) rule_step(S, ks, qs, a, g, start + u, h, j);
    }
    if (col)
        for (int64_t i = 0; i < g.dk; ++i) dS[i * g.dv + j] = 0.0f;
    for (int64_t u = L - 1; u >= 0; --u) {
        // S <- the state before token u, replayed from the stretch's checkpoint.
        const int64_t c0 = u / kStretch * kStretch;
        if (col)
            for (int64_t i = 0; i < g.dk; ++i) S[i * g.dv + j] = ck(u / kStretch)[i * g.dv + j];
        for (int64_t w = c0; w < u; ++w) {
            load_qk(ks, qs, a, g, start + w, h);
            if (col) rule_step(S, ks, qs, a, g, start + w, h, j);
        }
        const int64_t t = start + u;
        load_qk(ks, qs, a, g, t, h);
        const float decay = expf(a.g[t * g.Hv + h]);
        const float beta = a.beta[t * g.Hv + h];
        float p = 0.0f, vj = 0.0f, doj = 0.0f, ddelta = 0.0f;
        if (col) {
            for (int64_t i = 0; i < g.dk; ++i) p += decay * S[i * g.dv + j] * ks[i];
            vj = a.v[t * g.vs + h * g.dv + j];
            doj = dout[(t * g.Hv + h) * g.dv + j];
            for (int64_t i = 0; i < g.dk; ++i) {
                const float ds = dS[i * g.dv + j] + qs[i] * doj;  // o = S_t^T (scale q)
                dS[i * g.dv + j] = ds;
                ddelta += ds * ks[i];
            }
        }
        const float delta = beta * (vj - p);
        const float dp = -beta * ddelta;
        float dg_part = 0.0f;
        for (int64_t i = 0; i < g.dk; ++i) {
            float r1 = 0.0f, r2 = 0.0f;
            if (col) {
                const float sp = decay * S[i * g.dv + j];  // S' (decayed)
                const float st = sp + ks[i] * delta;       // S_t
                const float ds = dS[i * g.dv + j];
                r1 = st * doj;
                r2 = ds * delta + sp * dp;
                const float dsp = ds + ks[i] * dp;  // d S'
                dg_part += dsp * sp;
                dS[i * g.dv + j] = decay * dsp;  // d S_{t-1}
            }
            r1 = cuda::warp_sum(r1);
            r2 = cuda::warp_sum(r2);
            if (lane == 0) {
                red1[warp][i] = r1;
                red2[warp][i] = r2;
            }
        }
        const float dg_sum = cuda::block_sum(dg_part, scratch);
        const float dbeta_sum = cuda::block_sum(col ? ddelta * (vj - p) : 0.0f, scratch);
        __syncthreads();
        for (int64_t i = threadIdx.x; i < g.dk; i += blockDim.x) {
            float s1 = 0.0f, s2 = 0.0f;
            for (int w = 0; w < warps; ++w) {
                s1 += red1[w][i];
                s2 += red2[w][i];
            }
            dqv[(t * g.Hv + h) * g.dk + i] = s1 * g.scale;
            dkv[(t * g.Hv + h) * g.dk + i] = s2;
        }
        if (col) dv_out[t * g.vs + h * g.dv + j] = beta * ddelta;
        if (threadIdx.x == 0) {
            dg_out[t * g.Hv + h] = dg_sum;
            dbeta_out[t * g.Hv + h] = dbeta_sum;
        }
    }
}

// dq[t, kh] = sum over the group's value heads of dqv[t, vh], ascending.
__global__ void group_sum_kernel(float* out, const float* in, int64_t T, int64_t Hk, int64_t Hv,
                                 int64_t dk) {
    const int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    if (n >= T * Hk * dk) return;
    const int64_t i = n % dk, kh = (n / dk) % Hk, t = n / (dk * Hk), r = Hv / Hk;
    float s = 0.0f;
    for (int64_t m = 0; m < r; ++m) s += in[(t * Hv + kh * r + m) * dk + i];
    out[n] = s;
}

__global__ void gated_rmsnorm_forward_kernel(bf16* out, float* rstd, const float* x, const bf16* z,
                                             const float* w, int64_t rows, int64_t cols,
                                             float eps) {
    const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float* xr = x + r * cols;
    float ss = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) ss += xr[c] * xr[c];
    const float rs = 1.0f / sqrtf(cuda::warp_sum(ss) / static_cast<float>(cols) + eps);
    for (int64_t c = lane; c < cols; c += 32) {
        const float zc = __bfloat162float(z[r * cols + c]);
        out[r * cols + c] = __float2bfloat16(w[c] * (xr[c] * rs) * (zc / (1.0f + expf(-zc))));
    }
    if (lane == 0) rstd[r] = rs;
}

__global__ void gated_rmsnorm_backward_kernel(float* dx, bf16* dz, const bf16* dout, const float* x,
                                              const bf16* z, const float* w, const float* rstd,
                                              int64_t rows, int64_t cols) {
    const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float rs = rstd[r];
    float mean = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) {
        const int64_t n = r * cols + c;
        const float xhat = x[n] * rs, zc = __bfloat162float(z[n]), dy = __bfloat162float(dout[n]);
        const float sig = 1.0f / (1.0f + expf(-zc));
        dz[n] = __float2bfloat16(dy * w[c] * xhat * sig * (1.0f + zc * (1.0f - sig)));
        mean += dy * zc * sig * w[c] * xhat;
    }
    mean = cuda::warp_sum(mean) / static_cast<float>(cols);
    for (int64_t c = lane; c < cols; c += 32) {
        const int64_t n = r * cols + c;
        const float zc = __bfloat162float(z[n]);
        const float h = __bfloat162float(dout[n]) * (zc / (1.0f + expf(-zc))) * w[c];
        dx[n] = rs * (h - x[n] * rs * mean);
    }
}

// One block per column.
__global__ void gated_rmsnorm_dw_kernel(float* dw, const bf16* dout, const float* x, const bf16* z,
                                        const float* rstd, int64_t rows, int64_t cols) {
    __shared__ float scratch[32];
    const int64_t c = blockIdx.x;
    float s = 0.0f;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        const int64_t n = r * cols + c;
        const float zc = __bfloat162float(z[n]);
        s += __bfloat162float(dout[n]) * (zc / (1.0f + expf(-zc))) * x[n] * rstd[r];
    }
    s = cuda::block_sum(s, scratch);
    if (threadIdx.x == 0) dw[c] += s;
}

RuleGeom geom_of(const GdnRuleArgs& a) {
    return {a.k_heads, a.v_heads, a.dk, a.dv, a.v_token_stride, a.scale};
}

unsigned rule_threads(const GdnRuleArgs& a) {
    const int64_t m = a.dk > a.dv ? a.dk : a.dv;
    return static_cast<unsigned>((m + 31) / 32 * 32);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers

cudaError_t gdn_conv_silu_forward_simple(float* out, const bf16* x, const float* w,
                                         const int32_t* cu_seqlens, int64_t num_docs,
                                         int64_t tokens, int64_t channels, int64_t kernel,
                                         cudaStream_t stream) {
    if (num_docs < 1 || kernel < 1 || kernel > 8) return cudaErrorInvalidValue;
    if (tokens == 0) return cudaSuccess;
    conv_forward_kernel<<<blocks_for(tokens * channels), kThreads, 0, stream>>>(
        out, x, w, cu_seqlens, num_docs, tokens, channels, kernel);
    return cudaGetLastError();
}

cudaError_t gdn_conv_silu_backward_simple(bf16* dx, float* dw, const float* dout, const bf16* x,
                                          const float* w, const int32_t* cu_seqlens,
                                          int64_t num_docs, int64_t tokens, int64_t channels,
                                          int64_t kernel, cudaStream_t stream) {
    if (num_docs < 1 || kernel < 1 || kernel > 8) return cudaErrorInvalidValue;
    if (tokens == 0) return cudaSuccess;
    conv_backward_dx_kernel<<<blocks_for(tokens * channels), kThreads, 0, stream>>>(
        dx, dout, x, w, cu_seqlens, num_docs, tokens, channels, kernel);
    conv_backward_dw_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
        dw, dout, x, w, cu_seqlens, num_docs, tokens, channels, kernel);
    return cudaGetLastError();
}

cudaError_t gdn_l2norm_forward_simple(float* out, float* rnorm, const float* x,
                                      int64_t x_token_stride, int64_t tokens, int64_t heads,
                                      int64_t dim, float eps, cudaStream_t stream) {
    const int64_t rows = tokens * heads;
    if (rows == 0) return cudaSuccess;
    l2norm_forward_kernel<<<blocks_for(rows, kWarpsPerBlock), kThreads, 0, stream>>>(
        out, rnorm, x, x_token_stride, rows, heads, dim, eps);
    return cudaGetLastError();
}

cudaError_t gdn_l2norm_backward_simple(float* dx, int64_t dx_token_stride, const float* dout,
                                       const float* out, const float* rnorm, int64_t tokens,
                                       int64_t heads, int64_t dim, cudaStream_t stream) {
    const int64_t rows = tokens * heads;
    if (rows == 0) return cudaSuccess;
    l2norm_backward_kernel<<<blocks_for(rows, kWarpsPerBlock), kThreads, 0, stream>>>(
        dx, dx_token_stride, dout, out, rnorm, rows, heads, dim);
    return cudaGetLastError();
}

cudaError_t gdn_gates_forward_simple(float* beta, float* g, const bf16* b, const bf16* a,
                                     const float* A_log, const float* dt_bias, int64_t tokens,
                                     int64_t heads, cudaStream_t stream) {
    if (tokens * heads == 0) return cudaSuccess;
    gates_forward_kernel<<<blocks_for(tokens * heads), kThreads, 0, stream>>>(
        beta, g, b, a, A_log, dt_bias, tokens, heads);
    return cudaGetLastError();
}

cudaError_t gdn_gates_backward_simple(bf16* db, bf16* da, float* dA_log, float* ddt_bias,
                                      const float* dbeta, const float* dg, const bf16* b,
                                      const bf16* a, const float* A_log, const float* dt_bias,
                                      int64_t tokens, int64_t heads, cudaStream_t stream) {
    if (heads == 0) return cudaSuccess;
    gates_backward_kernel<<<static_cast<unsigned>(heads), kThreads, 0, stream>>>(
        db, da, dA_log, ddt_bias, dbeta, dg, b, a, A_log, dt_bias, tokens, heads);
    return cudaGetLastError();
}

bool gdn_rule_simple_supported(const GdnRuleArgs& a) {
    return a.q && a.k && a.v && a.g && a.beta && a.cu_seqlens && a.num_docs >= 1 && a.k_heads > 0 &&
           a.v_heads % a.k_heads == 0 && a.dk > 0 && a.dv > 0 && a.dk <= kMaxHeadDim &&
           a.dv <= kMaxHeadDim && a.num_docs <= 65535 * 1024 && a.v_heads <= 65535;
}

size_t gdn_rule_forward_simple_workspace_bytes(const GdnRuleArgs& a) {
    return sizeof(float) * static_cast<size_t>(a.num_docs * a.v_heads * a.dk * a.dv);
}

cudaError_t gdn_rule_forward_simple(float* out, const GdnRuleArgs& a, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
    if (!gdn_rule_simple_supported(a) ||
        workspace_bytes < gdn_rule_forward_simple_workspace_bytes(a)) {
        return cudaErrorInvalidValue;
    }
    if (a.tokens == 0) return cudaSuccess;
    const dim3 grid(static_cast<unsigned>(a.num_docs), static_cast<unsigned>(a.v_heads));
    rule_forward_kernel<<<grid, rule_threads(a), 0, stream>>>(out, a, geom_of(a),
                                                              static_cast<float*>(workspace));
    return cudaGetLastError();
}

// Per block: S and dS; checkpoint slots: document d's stretch c lives in slot
// cu[d] / kStretch + d + c, unique and below tokens / kStretch + num_docs + 1; then the
// per-value-head dq and dk before the group sum.
size_t gdn_rule_backward_simple_workspace_bytes(const GdnRuleArgs& a) {
    const int64_t n = a.dk * a.dv;
    const int64_t slots = a.tokens / kStretch + a.num_docs + 1;
    return sizeof(float) *
           static_cast<size_t>(2 * a.num_docs * a.v_heads * n + slots * a.v_heads * n +
                               2 * a.tokens * a.v_heads * a.dk);
}

cudaError_t gdn_rule_backward_simple(float* dq, float* dk, float* dv, float* dg, float* dbeta,
                                     const float* dout, const GdnRuleArgs& a, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
    if (!gdn_rule_simple_supported(a) ||
        workspace_bytes < gdn_rule_backward_simple_workspace_bytes(a)) {
        return cudaErrorInvalidValue;
    }
    if (a.tokens == 0) return cudaSuccess;
    const int64_t n = a.dk * a.dv;
    auto* states = static_cast<float*>(workspace);
    float* ckpt = states + 2 * a.num_docs * a.v_heads * n;
    float* dqv = ckpt + (a.tokens / kStretch + a.num_docs + 1) * a.v_heads * n;
    float* dkv = dqv + a.tokens * a.v_heads * a.dk;
    const dim3 grid(static_cast<unsigned>(a.num_docs), static_cast<unsigned>(a.v_heads));
    rule_backward_kernel<<<grid, rule_threads(a), 0, stream>>>(dqv, dkv, dv, dg, dbeta, dout, a,
                                                               geom_of(a), states, ckpt);
    const int64_t qn = a.tokens * a.k_heads * a.dk;
    group_sum_kernel<<<blocks_for(qn), kThreads, 0, stream>>>(dq, dqv, a.tokens, a.k_heads,
                                                              a.v_heads, a.dk);
    group_sum_kernel<<<blocks_for(qn), kThreads, 0, stream>>>(dk, dkv, a.tokens, a.k_heads,
                                                              a.v_heads, a.dk);
    return cudaGetLastError();
}

cudaError_t gdn_gated_rmsnorm_forward_simple(bf16* out, float* rstd, const float* x, const bf16* z,
                                             const float* w, int64_t rows, int64_t cols, float eps,
                                             cudaStream_t stream) {
    if (rows == 0) return cudaSuccess;
    gated_rmsnorm_forward_kernel<<<blocks_for(rows, kWarpsPerBlock), kThreads, 0, stream>>>(
        out, rstd, x, z, w, rows, cols, eps);
    return cudaGetLastError();
}

cudaError_t gdn_gated_rmsnorm_backward_simple(float* dx, bf16* dz, float* dw, const bf16* dout,
                                              const float* x, const bf16* z, const float* w,
                                              const float* rstd, int64_t rows, int64_t cols,
                                              cudaStream_t stream) {
    if (rows == 0) return cudaSuccess;
    gated_rmsnorm_backward_kernel<<<blocks_for(rows, kWarpsPerBlock), kThreads, 0, stream>>>(
        dx, dz, dout, x, z, w, rstd, rows, cols);
    gated_rmsnorm_dw_kernel<<<static_cast<unsigned>(cols), kThreads, 0, stream>>>(dw, dout, x, z,
                                                                                  rstd, rows, cols);
    return cudaGetLastError();
}

}  // namespace deltatune
