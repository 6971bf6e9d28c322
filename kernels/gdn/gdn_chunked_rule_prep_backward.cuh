// chunk_prep_backward of the gated delta rule (see gdn_chunked_rule.cu for the math): per chunk
// and value head, the gradients of W, U, Qd, Kd, Aqk and gam pushed back through T, the masks,
// the gates and the L2 norm to dQn, dKn, dV, da and db.
//
// bf16 products, as FLA keeps these intermediates: the product operands (Qn, Kn, V, dVn, dW, T
// and the three 64 x 64 squares the kernel makes as operands) are bf16 tiles in shared memory,
// rounded where they are made; accumulation, the squares that feed sums and every reduction stay
// fp32. dKn is accumulated in registers (each warp owns a 32 x 32 tile through the kernel),
// dQn and dV are written from the products' registers, and the two row sums that would need a
// 64 x 128 product result are taken from 64 x 64 squares instead (rowsum((T^T G) * X) =
// colsum(T * (G X^T))). That leaves 100 KB of shared memory: two blocks per multiprocessor, so
// one block's global loads overlap the other's products.
#pragma once

#include "kernels/gdn/gdn_chunked_rule_common.cuh"

namespace deltatune {
namespace {

using cuda::mm_bf16;
using cuda::warp_tile_mma;
using cuda::WarpTile32;

constexpr int kPrepBwdThreads = 256;
constexpr int kPrepBwdWarps = kPrepBwdThreads / 32;
constexpr int kPrepBwdTileDiv = 2;
static_assert(kC * kLdBS <= kC * kLdB);

struct PrepBwdSmem {
    __nv_bfloat16 K[kC * kLdB];   // Kn
    __nv_bfloat16 QV[kC * kLdB];  // Qn, then V, then the dT square, then P
    __nv_bfloat16 DW[kC * kLdB];  // the Aqk part's Z square, then dVn, then dW, then T^T dT
    __nv_bfloat16 T[kC * kLdBS];
    float F1[kSSquare];  // fp32 squares, stride kLdC
    float F2[kSSquare];
    float dbeta[kC];
    float dG[kC];
    float tmp[kC];
    float red[4];
    float part[kPrepBwdThreads];  // column-sum partials
    ChunkMeta meta;
};
constexpr size_t kPrepBwdSmem = sizeof(PrepBwdSmem);
static_assert(2 * (kPrepBwdSmem + 1024) <= 228 * 1024, "two blocks per multiprocessor");

// out[r] = sum_c G[r,c] S[r,c]: G a kC x kD fp32 tile in global memory, S bf16 in shared memory
// (stride kLdB). One warp per row, 4 columns per lane, a warp's loads issued together.
__device__ void row_dots_global(float* out, const float* G, const __nv_bfloat16* S) {
    constexpr int kRows = kC / kPrepBwdWarps;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float4 g[kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
        g[j] = *reinterpret_cast<const float4*>(G + (warp + j * kPrepBwdWarps) * kD + lane * 4);
    }
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
        const int r = warp + j * kPrepBwdWarps;
        float s[4];
        cuda::load4(S + r * kLdB + lane * 4, s);
        const float d =
            cuda::warp_sum(g[j].x * s[0] + g[j].y * s[1] + g[j].z * s[2] + g[j].w * s[3]);
        if (lane == 0) out[r] = d;
    }
}

// Column reductions of the 64 x 64 squares: thread (quarter q, column c) walks rows 16q..16q+15
// of column c, so a warp reads 32 consecutive words of a row (no bank conflicts, where a warp per
// column reads words 68 apart); the four quarters' partials are added in order.
constexpr int kColParts = kPrepBwdThreads / kC;
static_assert(kColParts * kC == kPrepBwdThreads && kC % kColParts == 0);

// part[c] = sum of column c's products over all rows, from the quarters' partials (after a
// barrier); threads below kC return their column's sum, the others 0.
__device__ float sum_col_parts(float* part, float partial) {
    part[threadIdx.x] = partial;
    __syncthreads();
    if (threadIdx.x >= kC) return 0.0f;
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kColParts; ++q) s += part[q * kC + threadIdx.x];
    return s;
}

// This thread's quarter of its column: sum of value(j, c) over rows j = 16q..16q+15 of column c.
template <typename F>
__device__ __forceinline__ float column_quarter(F&& value) {
    const int c = threadIdx.x % kC, s0 = (threadIdx.x / kC) * (kC / kColParts);
    float s = 0.0f;
#pragma unroll 4
    for (int j = s0; j < s0 + kC / kColParts; ++j) s += value(j, c);
    return s;
}

// out[r] = sum_s T[s,r] X[s,r]: T the bf16 square (stride kLdBS), X an fp32 one (kLdC).
__device__ void col_dots(float* out, const __nv_bfloat16* T, const float* X, float* part) {
    const float s = sum_col_parts(part, column_quarter([&](int j, int c) {
                                      return __bfloat162float(T[j * kLdBS + c]) * X[j * kLdC + c];
                                  }));
    if (threadIdx.x < kC) out[threadIdx.x] = s;
}

// acc[i] += sum_j X[i,j] - (with_cols ? sum_j X[j,i] : 0) for a kC x kC matrix of stride kLdC.
// Row sums a half-warp per row, four columns per lane (one 16-byte read, a 16-lane tree: half the
// instructions of a warp per row), column sums as col_dots; fixed order.
__device__ void add_row_col_sums(float* acc, const float* X, bool with_cols, float* part) {
    static_assert(kC == 64 && kC % (2 * kPrepBwdWarps) == 0);
    __syncthreads();
    float col = 0.0f;
    if (with_cols) col = column_quarter([&](int j, int c) { return X[j * kLdC + c]; });
    const int lane = threadIdx.x & 31, quad = lane & 15;
    for (int i = (threadIdx.x >> 5) * 2 + (lane >> 4); i < kC; i += kPrepBwdWarps * 2) {
        const float4 x = *reinterpret_cast<const float4*>(X + i * kLdC + quad * 4);
        float s = (x.x + x.y) + (x.z + x.w);
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (quad == 0) acc[i] += s;
    }
    if (with_cols) {
        col = sum_col_parts(part, col);  // its barrier orders the row sums' writes too
        if (threadIdx.x < kC) acc[threadIdx.x] -= col;
    }
    __syncthreads();
}

// Z = scale dAqk * E on the mask (bf16, the product operand in sm.DW) and H = Z * (Qn Kn^T) in
// place of Qn Kn^T (sm.F1). Four columns per thread, and the thread's dAqk loads all issued
// before the first use: a load per element behind the mask's branch waited out one global
// latency each (9% of the kernel's stall samples on one instruction).
__device__ void z_square(PrepBwdSmem& sm, const float* dAqk, float scale) {
    constexpr int kQuads = kSquare / 4 / kPrepBwdThreads;
    static_assert(kQuads * 4 * kPrepBwdThreads == kSquare);
    const ChunkMeta& m = sm.meta;
    float4 d[kQuads];
#pragma unroll
    for (int j = 0; j < kQuads; ++j) {
        d[j] = reinterpret_cast<const float4*>(dAqk)[threadIdx.x + j * kPrepBwdThreads];
    }
#pragma unroll
    for (int j = 0; j < kQuads; ++j) {
        const int q = threadIdx.x + j * kPrepBwdThreads;
        const int r = q / (kC / 4), s0 = (q % (kC / 4)) * 4;
        float4& h = *reinterpret_cast<float4*>(sm.F1 + r * kLdC + s0);
        const float da[4] = {d[j].x, d[j].y, d[j].z, d[j].w};
        float x[4] = {h.x, h.y, h.z, h.w}, z[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int s = s0 + e;
            const bool on = pair_on(m, r, s, false);
            z[e] = on ? da[e] * scale * expf(m.gam[r] - m.gam[s]) : 0.0f;
            x[e] = on ? z[e] * x[e] : 0.0f;
        }
        cuda::store4(sm.DW + r * kLdBS + s0, z);
        h = make_float4(x[0], x[1], x[2], x[3]);
    }
}

// Aqk = scale lower_same(Qn Kn^T * E), Qd = scale diag(exp(Gamma) f) Qn: with Z = scale dAqk * E
// on the mask and H = Z * (Qn Kn^T), dGamma gets rowsum(H) - colsum(H) and scale exp(Gamma)
// rowsum(dQd * Qn) on f rows; dQn = scale exp(Gamma) f dQd + Z Kn (written), dKn = Z^T Qn.
__device__ void aqk_qd_part(PrepBwdSmem& sm, const Ws& ws, int64_t tile, float scale,
                            WarpTile32& dkn, int m0, int n0) {
    const ChunkMeta& m = sm.meta;
    __nv_bfloat16* sZ = sm.DW;
    mm_bf16<kN, kT, kC, kC, kD, kLdB, kLdB, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sm.F1, sm.QV,
                                                                                  sm.K, 1.0f, 0.0f);
    __syncthreads();
    z_square(sm, ws.dAqk + tile * kSquare, scale);
    const float* dQd = ws.dQd + tile * kTile;
    row_dots_global(sm.tmp, dQd, sm.QV);
    add_row_col_sums(sm.dG, sm.F1, true, sm.part);
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        if (m.f[r] != 0.0f) sm.dG[r] += scale * m.eg[r] * sm.tmp[r];
    }
    WarpTile32 acc = {};
    warp_tile_mma<kN, kN, 2, 4, kC, kLdBS, kLdB>(acc, sZ, sm.K, m0, n0);
    float* dQn = ws.dQn + tile * kTile;
    cuda::for_each_pair(acc, m0, n0, [&](int r, int col, float& x0, float& x1) {
        float2 d = make_float2(0.0f, 0.0f);
        if (m.f[r] != 0.0f) {
            const float e = scale * m.eg[r];
            const float2 g = *reinterpret_cast<const float2*>(dQd + r * kD + col);
            d = make_float2(e * g.x, e * g.y);
        }
        *reinterpret_cast<float2*>(dQn + r * kD + col) = make_float2(d.x + x0, d.y + x1);
    });
    warp_tile_mma<kT, kN, 2, 4, kC, kLdBS, kLdB>(dkn, sZ, sm.QV, m0, n0);
}

// Kd = diag(exp(Gamma_L - Gamma) l) Kn: dKn += exp(Gamma_L - Gamma) l dKd; with e = exp(Gamma_L
// - Gamma) rowsum(dKd * Kn) on l rows, dGamma -= e, and the last row gets sum(e) and gam's part.
__device__ void kd_part(PrepBwdSmem& sm, const Ws& ws, int64_t tile, WarpTile32& dkn, int m0,
                        int n0) {
    const ChunkMeta& m = sm.meta;
    const float* dKd = ws.dKd + tile * kTile;
    cuda::for_each_pair(dkn, m0, n0, [&](int r, int col, float& x0, float& x1) {
        if (m.l[r] != 0.0f) {
            const float2 d = *reinterpret_cast<const float2*>(dKd + r * kD + col);
            x0 += m.el[r] * d.x;
            x1 += m.el[r] * d.y;
        }
    });
    __syncthreads();  // the Aqk part's reads of tmp are done
    row_dots_global(sm.tmp, dKd, sm.K);
    __syncthreads();
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        const float e = m.l[r] != 0.0f ? m.el[r] * sm.tmp[r] : 0.0f;
        sm.dG[r] -= e;
        const float sum_e = cuda::warp_sum(e);
        if ((r & 31) == 0) sm.red[r >> 5] = sum_e;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        sm.dG[m.last] +=
            (sm.red[0] + sm.red[1]) + ws.dgam[tile] * m.f[m.last] * expf(m.gam[m.last]);
    }
}

// U = T diag(beta) V: X = dVn V^T (left in F2 for dT), dBv = T^T dVn, dV = beta dBv (written),
// dbeta = rowsum(dBv * V) = colsum(T * X).
__device__ void u_part(PrepBwdSmem& sm, const Ws& ws, int64_t tile, __nv_bfloat16* dv,
                       int64_t ld_dv, const __nv_bfloat16* v, int64_t ldv, int32_t c0,
                       int32_t tokens, int h, int m0, int n0) {
    const ChunkMeta& m = sm.meta;
    __syncthreads();  // Qn and Z are free
    copy_rows<kPrepBwdThreads, kC, kD, kLdB>(sm.QV, v + static_cast<int64_t>(c0) * ldv + h * kD,
                                             ldv, tokens - c0);
    copy_tile<kPrepBwdThreads, kC, kD, kLdB>(sm.DW, ws.dVn + tile * kTile);
    copies_wait();
    __syncthreads();
    mm_bf16<kN, kT, kC, kC, kD, kLdB, kLdB, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(
        sm.F2, sm.DW, sm.QV, 1.0f, 0.0f);
    WarpTile32 acc = {};
    warp_tile_mma<kT, kN, 2, 4, kC, kLdBS, kLdB>(acc, sm.T, sm.DW, m0, n0);
    cuda::for_each_pair(acc, m0, n0, [&](int r, int col, float& x0, float& x1) {
        const int32_t t = c0 + r;
        if (t < tokens) {
            *reinterpret_cast<__nv_bfloat162*>(dv + static_cast<int64_t>(t) * ld_dv + h * kD +
                                               col) =
                __floats2bfloat162_rn(m.beta[r] * x0, m.beta[r] * x1);
        }
    });
    __syncthreads();
    col_dots(sm.dbeta, sm.T, sm.F2, sm.part);
}

// W = T diag(beta exp(Gamma) f) Kn: Y = dW Kn^T (left in F1 for dT), dBk = T^T dW, dKn += beta
// exp(Gamma) f dBk; with w = exp(Gamma) f rowsum(dBk * Kn) = exp(Gamma) f colsum(T * Y), dbeta +=
// w and dGamma += beta w.
__device__ void w_part(PrepBwdSmem& sm, const Ws& ws, int64_t tile, WarpTile32& dkn, int m0,
                       int n0) {
    const ChunkMeta& m = sm.meta;
    __syncthreads();  // dVn is free
    copy_tile<kPrepBwdThreads, kC, kD, kLdB>(sm.DW, ws.dW + tile * kTile);
    copies_wait();
    __syncthreads();
    mm_bf16<kN, kT, kC, kC, kD, kLdB, kLdB, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sm.F1, sm.DW,
                                                                                  sm.K, 1.0f, 0.0f);
    WarpTile32 acc = {};
    warp_tile_mma<kT, kN, 2, 4, kC, kLdBS, kLdB>(acc, sm.T, sm.DW, m0, n0);
#pragma unroll
    for (int fm = 0; fm < 2; ++fm) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = cuda::fragment_row(m0, fm, i);
            const float e = m.f[r] != 0.0f ? m.beta[r] * m.eg[r] : 0.0f;
#pragma unroll
            for (int fn = 0; fn < 4; ++fn) dkn[fm][fn][i] += e * acc[fm][fn][i];
        }
    }
    __syncthreads();
    col_dots(sm.tmp, sm.T, sm.F1, sm.part);
    __syncthreads();
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        const float w = m.f[r] != 0.0f ? m.eg[r] * sm.tmp[r] : 0.0f;
        sm.dbeta[r] += w;
        sm.dG[r] += w * m.beta[r];
    }
}

// T = (I + A)^-1: dT = X diag(beta) + Y diag(beta exp(Gamma) f), dA = -T^T dT T^T. A =
// strict_lower_same(diag(beta) Kn Kn^T * E): P = diag(beta) dA * E, H = P * (Kn Kn^T); dGamma
// gets rowsum(H) - colsum(H), dbeta rowsum(dA * E * Kn Kn^T), dKn += P Kn + P^T Kn.
__device__ void t_a_part(PrepBwdSmem& sm, WarpTile32& dkn, int m0, int n0) {
    const ChunkMeta& m = sm.meta;
    __nv_bfloat16* sdT = sm.QV;  // V is free; then P
    __nv_bfloat16* sZ = sm.DW;   // dW is free
    for_each_quad([&](int i, int s0) {
        const float4 x = *reinterpret_cast<const float4*>(sm.F2 + i * kLdC + s0);
        const float4 y = *reinterpret_cast<const float4*>(sm.F1 + i * kLdC + s0);
        const float xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
        float d[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int s = s0 + j;
            const float yg = m.f[s] != 0.0f ? ys[j] * m.eg[s] : 0.0f;
            d[j] = m.beta[s] * (xs[j] + yg);
        }
        cuda::store4(sdT + i * kLdBS + s0, d);
    });
    __syncthreads();
    mm_bf16<kT, kN, kC, kC, kC, kLdBS, kLdBS, kLdBS, kPrepBwdWarps, kPrepBwdTileDiv>(sZ, sm.T, sdT,
                                                                                     1.0f, 0.0f);
    __syncthreads();
    mm_bf16<kN, kT, kC, kC, kC, kLdBS, kLdBS, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sm.F2, sZ, sm.T,
                                                                                    -1.0f, 0.0f);
    mm_bf16<kN, kT, kC, kC, kD, kLdB, kLdB, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sm.F1, sm.K, sm.K,
                                                                                  1.0f, 0.0f);
    __syncthreads();
    for_each_quad([&](int r, int s0) {
        float4& x2 = *reinterpret_cast<float4*>(sm.F2 + r * kLdC + s0);
        float4& x1 = *reinterpret_cast<float4*>(sm.F1 + r * kLdC + s0);
        const float da[4] = {x2.x, x2.y, x2.z, x2.w}, kk[4] = {x1.x, x1.y, x1.z, x1.w};
        float p[4], zb[4], hh[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int s = s0 + j;
            p[j] = zb[j] = hh[j] = 0.0f;
            if (pair_on(m, r, s, true)) {
                const float de = da[j] * expf(m.gam[r] - m.gam[s]);
                zb[j] = de * kk[j];
                p[j] = m.beta[r] * de;
                hh[j] = p[j] * kk[j];
            }
        }
        x2 = make_float4(zb[0], zb[1], zb[2], zb[3]);
        x1 = make_float4(hh[0], hh[1], hh[2], hh[3]);
        cuda::store4(sdT + r * kLdBS + s0, p);
    });
    add_row_col_sums(sm.dG, sm.F1, true, sm.part);
    add_row_col_sums(sm.dbeta, sm.F2, false, sm.part);
    warp_tile_mma<kN, kN, 2, 4, kC, kLdBS, kLdB>(dkn, sdT, sm.K, m0, n0);
    warp_tile_mma<kT, kN, 2, 4, kC, kLdBS, kLdB>(dkn, sdT, sm.K, m0, n0);
}

// Gates: dg = reverse cumsum of dGamma; beta = sigmoid(b); g = -exp(A_log) softplus(a + dt).
// Suffix sums of dG: a shuffle scan in each of the two warps, then the upper warp's total. Writes
// da, db and the chunk's partial sums for dA_log and dt_bias.
__device__ void gate_grads(PrepBwdSmem& sm, const Ws& ws, int64_t tile, __nv_bfloat16* da,
                           __nv_bfloat16* db, const float* A_log, int32_t c0, int32_t tokens,
                           int v_heads, int h) {
    const ChunkMeta& m = sm.meta;
    float* scratch = sm.F1;  // free after the last sums
    if (threadIdx.x < kC) {
        const int r = threadIdx.x, lane = r & 31;
        float suffix = sm.dG[r];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float u = __shfl_down_sync(0xffffffffu, suffix, o);
            if (lane + o < 32) suffix += u;
        }
        if (r == 32) sm.red[2] = suffix;
        scratch[2 * kC + r] = suffix;
    }
    __syncthreads();
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        const float run = scratch[2 * kC + r] + (r < 32 ? sm.red[2] : 0.0f);
        const int32_t t = c0 + r;
        float d_a = 0.0f, d_A = 0.0f;
        if (t < tokens) {
            const int64_t n = static_cast<int64_t>(t) * v_heads + h;
            const float dsp = m.ax[r] > kSoftplusThreshold ? 1.0f : sigmoidf(m.ax[r]);
            d_a = run * (-expf(A_log[h])) * dsp;
            da[n] = __float2bfloat16_rn(d_a);
            db[n] = __float2bfloat16_rn(sm.dbeta[r] * m.beta[r] * (1.0f - m.beta[r]));
            d_A = run * m.g[r];
        }
        scratch[r] = d_a;
        scratch[kC + r] = d_A;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int r = threadIdx.x;
        const float sum_da = cuda::warp_sum(scratch[r] + scratch[r + 32]);
        const float sum_dA = cuda::warp_sum(scratch[kC + r] + scratch[kC + r + 32]);
        if (r == 0) {
            ws.pdt[tile] = sum_da;
            ws.pA[tile] = sum_dA;
        }
    }
}

__global__ void __launch_bounds__(kPrepBwdThreads, 2)
    gdn_chunk_prep_backward_kernel(Ws ws, __nv_bfloat16* dv, __nv_bfloat16* da, __nv_bfloat16* db,
                                   int64_t ld_dv, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                   const __nv_bfloat16* v, int64_t ldqk, int64_t ldv,
                                   const __nv_bfloat16* a, const __nv_bfloat16* b,
                                   const float* A_log, const float* dt_bias, const int32_t* cu,
                                   int64_t num_docs, int32_t tokens, int k_heads, int v_heads,
                                   float scale) {
    extern __shared__ __align__(128) float smem[];
    PrepBwdSmem& sm = *reinterpret_cast<PrepBwdSmem*>(smem);
    const int c = blockIdx.x, h = blockIdx.y;
    const int32_t c0 = c * kC;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    const int warp = threadIdx.x >> 5;
    const int m0 = (warp >> 2) * 32, n0 = (warp & 3) * 32;  // the warp's part of kC x kD results
    copy_tile<kPrepBwdThreads, kC, kC, kLdBS>(sm.T, ws.T + tile * kSquare);
    if (threadIdx.x < kC) {
        sm.dbeta[threadIdx.x] = 0.0f;
        sm.dG[threadIdx.x] = 0.0f;
    }
    load_chunk<kPrepBwdWarps>(sm.meta, sm.QV, sm.K, q, k, ldqk, a, b, A_log, dt_bias, cu, num_docs,
                              tokens, k_heads, v_heads, h, c);
    copies_wait();  // T
    __syncthreads();
    WarpTile32 dkn = {};
    aqk_qd_part(sm, ws, tile, scale, dkn, m0, n0);
    kd_part(sm, ws, tile, dkn, m0, n0);
    u_part(sm, ws, tile, dv, ld_dv, v, ldv, c0, tokens, h, m0, n0);
    w_part(sm, ws, tile, dkn, m0, n0);
    t_a_part(sm, dkn, m0, n0);
    float* dKn = ws.dKn + tile * kTile;
    cuda::for_each_pair(dkn, m0, n0, [&](int r, int col, float& x0, float& x1) {
        *reinterpret_cast<float2*>(dKn + r * kD + col) = make_float2(x0, x1);
    });
    gate_grads(sm, ws, tile, da, db, A_log, c0, tokens, v_heads, h);
}

}  // namespace
}  // namespace deltatune
