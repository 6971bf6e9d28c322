// Shared by gdn_chunked_rule.cu (forward) and gdn_chunked_rule_backward.cu: the chunk geometry,
// the workspace layout (Ws, carve) and chunk_prep with its launcher (the recurrences that follow
// it: gdn_chunked_rule_recurrence.cuh). Everything is in an anonymous namespace: each translation
// unit compiles its own copy of these device functions.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/tile_mma.cuh"
#include "kernels/common/varlen.cuh"
#include "kernels/gdn/gdn_chunked_rule.h"

namespace deltatune {
namespace {

using cuda::kN;
using cuda::kT;
using cuda::mm_bf16;

constexpr int kD = 128;  // dk = dv
constexpr int kC = 64;   // chunk
constexpr int kThreads = 256;
constexpr float kNormEps = 1e-6f;
constexpr float kSoftplusThreshold = 20.0f;

constexpr int64_t kTile = int64_t{kC} * kD;    // one chunk-head (64 x 128) fp32 tile
constexpr int64_t kSquare = int64_t{kC} * kC;  // one chunk-head (64 x 64) tile
constexpr int64_t kState = int64_t{kD} * kD;   // one chunk-head state

// Shared-memory row strides. fp32 squares (kC x kC, written by the products as float2 pairs and
// read across rows and columns) have rows 4 banks apart.
constexpr int kLdC = kC + 4;
constexpr int kSSquare = kC * kLdC;
// bf16 tiles, read through ldmatrix in either orientation: rows 16 bytes apart modulo 128.
constexpr int kLdB = kD + 8;   // kC x kD
constexpr int kLdBS = kC + 8;  // kC x kC

__device__ __forceinline__ float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float softplusf(float x) {
    return x > kSoftplusThreshold ? x : log1pf(expf(x));
}

// Per-row chunk metadata shared by the chunk kernels.
struct ChunkMeta {
    float gam[kC];    // Gamma, chunk-local inclusive cumsum of g
    float g[kC];      // log decay (0 past the end of the stream)
    float beta[kC];   // 0 past the end
    float ax[kC];     // a + dt_bias, the softplus argument
    float f[kC];      // 1 if the row continues the document running before the chunk
    float l[kC];      // 1 if the row is in the chunk's last document
    float eg[kC];     // exp(Gamma)
    float el[kC];     // exp(Gamma_L - Gamma)
    int32_t doc[kC];  // document index, -1 past the end
    int last;         // last valid row
};

// Fills meta (gates, documents, Gamma, masks) for chunk c of value head h and loads the
// L2-normalised q, k rows of its key head into sQ, sK (kC x kD bf16, stride kLdB, zero past the
// end); ldqk: elements from one token's q (and k) row to the next.
// Each lane holds 4 consecutive channels of a row; a warp issues all its rows' loads before the
// first reduction, so they overlap.
template <int kWarps>
__device__ void load_chunk(ChunkMeta& m, __nv_bfloat16* sQ, __nv_bfloat16* sK,
                           const __nv_bfloat16* q, const __nv_bfloat16* k, int64_t ldqk,
                           const __nv_bfloat16* a, const __nv_bfloat16* b, const float* A_log,
                           const float* dt_bias, const int32_t* cu, int64_t num_docs,
                           int32_t tokens, int k_heads, int v_heads, int h, int c) {
    constexpr int kRowsPerWarp = kC / kWarps;
    const int32_t c0 = c * kC;
    const int kh = h / (v_heads / k_heads);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int last = min(kC, tokens - c0) - 1;
    if (threadIdx.x < kC) {
        const int i = threadIdx.x;
        const int32_t t = c0 + i;
        if (t < tokens) {
            const int64_t n = static_cast<int64_t>(t) * v_heads + h;
            m.doc[i] = static_cast<int32_t>(cuda::doc_of(cu, num_docs, t));
            m.beta[i] = sigmoidf(__bfloat162float(b[n]));
            m.ax[i] = __bfloat162float(a[n]) + dt_bias[h];
            m.g[i] = -expf(A_log[h]) * softplusf(m.ax[i]);
        } else {
            m.doc[i] = -1;
            m.beta[i] = 0.0f;
            m.ax[i] = 0.0f;
            m.g[i] = 0.0f;
        }
        if (i == 0) m.last = last;
    }
    uint2 qraw[kRowsPerWarp], kraw[kRowsPerWarp];
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
        const int32_t t = c0 + warp + j * kWarps;
        if (t < tokens) {
            const int64_t o = static_cast<int64_t>(t) * ldqk + kh * kD + lane * 4;
            qraw[j] = *reinterpret_cast<const uint2*>(q + o);
            kraw[j] = *reinterpret_cast<const uint2*>(k + o);
        } else {
            qraw[j] = kraw[j] = make_uint2(0u, 0u);
        }
    }
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
        const int r = warp + j * kWarps;
        float qf[4], kf[4];
        cuda::unpack4(qraw[j], qf);
        cuda::unpack4(kraw[j], kf);
        float sq = 0.0f, sk = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sq += qf[i] * qf[i];
            sk += kf[i] * kf[i];
        }
        const float rq = rsqrtf(cuda::warp_sum(sq) + kNormEps);
        const float rk = rsqrtf(cuda::warp_sum(sk) + kNormEps);
        const float qn[4] = {qf[0] * rq, qf[1] * rq, qf[2] * rq, qf[3] * rq};
        const float kn[4] = {kf[0] * rk, kf[1] * rk, kf[2] * rk, kf[3] * rk};
        cuda::store4(sQ + r * kLdB + lane * 4, qn);
        cuda::store4(sK + r * kLdB + lane * 4, kn);
    }
    __syncthreads();
    if (threadIdx.x < kC) {
        const int i = threadIdx.x;
        float s = 0.0f;
        for (int j = 0; j <= i; ++j) s += m.g[j];
        m.gam[i] = s;
    }
    __syncthreads();
    if (threadIdx.x < kC) {
        const int i = threadIdx.x;
        const bool continues = cu[m.doc[0]] != c0;
        m.f[i] = (continues && m.doc[i] == m.doc[0]) ? 1.0f : 0.0f;
        m.l[i] = (m.doc[i] >= 0 && m.doc[i] == m.doc[last]) ? 1.0f : 0.0f;
        m.eg[i] = expf(m.gam[i]);
        m.el[i] = expf(m.gam[last] - m.gam[i]);
    }
    __syncthreads();
}

// Pair masks: s < r (strict) or s <= r, both rows valid and in one document.
__device__ __forceinline__ bool pair_on(const ChunkMeta& m, int r, int s, bool strict) {
    return (strict ? s < r : s <= r) && m.doc[s] >= 0 && m.doc[r] == m.doc[s];
}

// sT = (I + sA)^-1 for strictly lower sA (kC x kC, stride kLdC): the four 16 x 16 diagonal
// blocks by forward substitution (one warp each), then the block rows below in order.
__device__ void invert_unit_lower(float* sT, const float* sA, float* scratch /* 3 x 256 */) {
    for (int n = threadIdx.x; n < kC * kC; n += blockDim.x) sT[(n / kC) * kLdC + n % kC] = 0.0f;
    __syncthreads();
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    if (warp < 4 && lane < 16) {
        const int o = warp * 16;
        float x[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            float v = r == lane ? 1.0f : 0.0f;
#pragma unroll
            for (int s = 0; s < r; ++s) v -= sA[(o + r) * kLdC + o + s] * x[s];
            x[r] = v;
            sT[(o + r) * kLdC + o + lane] = v;
        }
    }
    __syncthreads();
    // The block rows: a thread takes four columns of a row (one 16-byte read of the right operand
    // per step, where one element per thread read two words per multiply-add).
    for (int i = 1; i < 4; ++i) {
        // P_j = sum_{m=j}^{i-1} A_im T_mj for j < i, then T_ij = -T_ii P_j.
        for (int n = threadIdx.x; n < i * 64; n += blockDim.x) {
            const int j = n / 64, r = (n % 64) / 4, c0 = (n % 4) * 4;
            float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int s = j * 16; s < i * 16; ++s) {
                const float a = sA[(i * 16 + r) * kLdC + s];
                const float4 t = *reinterpret_cast<const float4*>(sT + s * kLdC + j * 16 + c0);
                p[0] += a * t.x;
                p[1] += a * t.y;
                p[2] += a * t.z;
                p[3] += a * t.w;
            }
            *reinterpret_cast<float4*>(scratch + j * 256 + r * 16 + c0) =
                make_float4(p[0], p[1], p[2], p[3]);
        }
        __syncthreads();
        // T_ii is lower triangular with exact zeros above: summing all 16 steps adds only zero
        // products past s = r (the same bits as stopping there) and keeps the warp's rows in step.
        for (int n = threadIdx.x; n < i * 64; n += blockDim.x) {
            const int j = n / 64, r = (n % 64) / 4, c0 = (n % 4) * 4;
            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                const float a = sT[(i * 16 + r) * kLdC + i * 16 + s];
                const float4 x = *reinterpret_cast<const float4*>(scratch + j * 256 + s * 16 + c0);
                t[0] += a * x.x;
                t[1] += a * x.y;
                t[2] += a * x.z;
                t[3] += a * x.w;
            }
            *reinterpret_cast<float4*>(sT + (i * 16 + r) * kLdC + j * 16 + c0) =
                make_float4(-t[0], -t[1], -t[2], -t[3]);
        }
        __syncthreads();
    }
}

// Workspace views, [chunk][v_head] tiles: what only products read is bf16, as
// flash-linear-attention keeps it; the rest fp32.
struct Ws {
    __nv_bfloat16 *W, *U, *Qd, *Kd, *Aqk, *T;  // forward, bf16
    float* gam;                                // forward, fp32
    __nv_bfloat16 *h, *Vn;                     // saved for the backward, bf16
    __nv_bfloat16 *dVn, *dW;                   // backward, bf16 (only products read them)
    float *dh, *dQd, *dKd, *dAqk, *dgam, *dQn, *dKn, *pA, *pdt;  // backward
};

__host__ __device__ inline int64_t num_chunks(int64_t tokens) {
    return (tokens + kC - 1) / kC;
}

// Three parts: the forward's intermediates (W .. gam); what a training forward saves beyond them
// for the backward (the states entering each chunk, h, and Vn); the backward's own scratch. A
// region holds the parts from `from` to `to` (0: forward, 1: saved, 2: scratch) in that order;
// `saved` (may be null) takes parts 0 and 1 instead, so a backward can find a training forward's
// intermediates where it left them and put only its scratch in `base`.
Ws carve_parts(void* base, const void* saved, int64_t tokens, int64_t v_heads, int to,
               size_t* bytes) {
    const int64_t n = num_chunks(tokens) * v_heads;
    char* p = static_cast<char*>(saved ? const_cast<void*>(saved) : base);
    size_t off = 0;
    auto take_bytes = [&](size_t bytes) {
        char* r = p + off;
        off += (bytes + 255) / 256 * 256;
        return r;
    };
    auto take = [&](int64_t floats) {
        return reinterpret_cast<float*>(take_bytes(static_cast<size_t>(floats) * sizeof(float)));
    };
    auto take_bf16 = [&](int64_t count) {
        return reinterpret_cast<__nv_bfloat16*>(
            take_bytes(static_cast<size_t>(count) * sizeof(__nv_bfloat16)));
    };
    Ws w{};
    w.W = take_bf16(n * kTile);
    w.U = take_bf16(n * kTile);
    w.Qd = take_bf16(n * kTile);
    w.Kd = take_bf16(n * kTile);
    w.Aqk = take_bf16(n * kSquare);
    w.T = take_bf16(n * kSquare);
    w.gam = take(n);
    if (to >= 1) {
        w.h = take_bf16(n * kState);
        w.Vn = take_bf16(n * kTile);
    }
    if (to >= 2) {
        if (saved) p = static_cast<char*>(base), off = 0;
        w.dh = take(n * kState);
        w.dVn = take_bf16(n * kTile);
        w.dQd = take(n * kTile);
        w.dW = take_bf16(n * kTile);
        w.dKd = take(n * kTile);
        w.dAqk = take(n * kSquare);
        w.dgam = take(n);
        w.dQn = take(n * kTile);
        w.dKn = take(n * kTile);
        w.pA = take(n);
        w.pdt = take(n);
    }
    if (bytes) *bytes = off;
    return w;
}

Ws carve(void* base, int64_t tokens, int64_t v_heads, bool backward, size_t* bytes) {
    return carve_parts(base, nullptr, tokens, v_heads, backward ? 2 : 0, bytes);
}

// kernels

// Asynchronous 16-byte global-to-shared copies (cuda::cp_async16): every load of a tile is in
// flight at once. Readers call copies_wait() and then a barrier.
using cuda::cp_async16;

__device__ __forceinline__ void copies_wait() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Asynchronous tile copies with the geometry fixed at compile time, kBlock the block's threads:
// each thread's offsets are known once, so every 16-byte copy is one instruction. (A loop over
// runtime bounds spent about 20 instructions of address arithmetic per copy, a third of the
// serial recurrences' instructions.)

// Starts copying a kRows x kCols bf16 tile stored contiguously (row stride kCols) into shared
// memory of row stride kLdd.
template <int kBlock, int kRows, int kCols, int kLdd>
__device__ __forceinline__ void copy_tile(__nv_bfloat16* dst, const __nv_bfloat16* src) {
    constexpr int kVecs = kCols / 8;          // 16-byte pieces per row
    constexpr int kRowStep = kBlock / kVecs;  // rows between one thread's pieces
    static_assert(kCols % 8 == 0 && kBlock % kVecs == 0 && kRows % kRowStep == 0);
    const int r = threadIdx.x / kVecs, c = (threadIdx.x % kVecs) * 8;
    dst += r * kLdd + c;
    src += r * kCols + c;
#pragma unroll
    for (int j = 0; j < kRows / kRowStep; ++j) {
        cp_async16(dst + j * kRowStep * kLdd, src + j * kRowStep * kCols);
    }
}

// Starts copying kRows rows of kCols bf16 from global rows `stride` elements apart, the 16 bytes
// at (row, col) to dst_at(row, col) in shared memory (the destination layout); rows at or past
// `valid` are zeroed instead.
template <int kBlock, int kRows, int kCols, typename DstAt>
__device__ __forceinline__ void copy_rows_to(DstAt&& dst_at, const __nv_bfloat16* src,
                                             int64_t stride, int valid) {
    constexpr int kVecs = kCols / 8;
    constexpr int kRowStep = kBlock / kVecs;
    static_assert(kCols % 8 == 0 && kBlock % kVecs == 0 && kRows % kRowStep == 0);
    const int r = threadIdx.x / kVecs, c = (threadIdx.x % kVecs) * 8;
#pragma unroll
    for (int j = 0; j < kRows / kRowStep; ++j) {
        const int row = r + j * kRowStep;
        void* d = dst_at(row, c);
        if (row < valid) {
            cp_async16(d, src + row * stride + c);
        } else {
            *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// copy_rows_to into shared rows kLdd elements apart.
template <int kBlock, int kRows, int kCols, int kLdd>
__device__ __forceinline__ void copy_rows(__nv_bfloat16* dst, const __nv_bfloat16* src,
                                          int64_t stride, int valid) {
    copy_rows_to<kBlock, kRows, kCols>([&](int row, int col) { return dst + row * kLdd + col; },
                                       src, stride, valid);
}

// Warp tiles of the chunk kernels' products (see mm_bf16): measured per kernel on the 27B layer.
constexpr int kPrepTileDiv = 4;

// Shared memory of chunk_prep: bf16 operand tiles (Qn, Kn, V, the scaled T), fp32 squares for
// the masks and the inverse; small enough for three blocks per multiprocessor. Its size is the
// launch's (kPrepSmem), so the layout and the launch cannot disagree.
struct PrepSmem {
    __nv_bfloat16 K[kC * kLdB];   // Kn
    __nv_bfloat16 QV[kC * kLdB];  // Qn, then V
    float A[kSSquare];            // Qn Kn^T, then A; then the scaled T as bf16 (stride kLdBS)
    float T[kSSquare];            // (I + A)^-1
    float scratch[3 * 256];
    ChunkMeta meta;
};
constexpr size_t kPrepSmem = sizeof(PrepSmem);
static_assert(3 * (kPrepSmem + 1024) <= 228 * 1024, "three chunk_prep blocks per multiprocessor");
static_assert(kC * kLdBS * sizeof(__nv_bfloat16) <= sizeof(PrepSmem::A));

// Qd = scale diag(exp(Gamma) f) Qn and Kd = diag(l exp(Gamma_L - Gamma)) Kn to global (bf16).
__device__ void store_qd_kd(const PrepSmem& sm, const Ws& ws, int64_t tile, float scale) {
    const ChunkMeta& m = sm.meta;
    for (int n = threadIdx.x; n < kTile / 4; n += blockDim.x) {
        const int r = n / (kD / 4), col = (n % (kD / 4)) * 4;
        const float sq = scale * m.eg[r] * m.f[r], sk = m.l[r] * m.el[r];
        float qv[4], kv[4];
        cuda::load4(sm.QV + r * kLdB + col, qv);
        cuda::load4(sm.K + r * kLdB + col, kv);
        const float qd[4] = {sq * qv[0], sq * qv[1], sq * qv[2], sq * qv[3]};
        const float kd[4] = {sk * kv[0], sk * kv[1], sk * kv[2], sk * kv[3]};
        cuda::store4(ws.Qd + tile * kTile + r * kD + col, qd);
        cuda::store4(ws.Kd + tile * kTile + r * kD + col, kd);
    }
}

// The chunk's squares in groups of four columns of one row (r, s0..s0 + 3): a quarter of the
// element-wise passes' index arithmetic and shared-memory accesses.
template <typename F>
__device__ __forceinline__ void for_each_quad(F&& f) {
    for (int n = threadIdx.x; n < kSquare / 4; n += blockDim.x) f(n / (kC / 4), (n % (kC / 4)) * 4);
}

// Aqk = scale lower_same(S * E) from S = Qn Kn^T (sA), to global (bf16).
__device__ void store_aqk(const PrepSmem& sm, __nv_bfloat16* aqk, float scale) {
    const ChunkMeta& m = sm.meta;
    for_each_quad([&](int r, int s0) {
        float x[4];
        *reinterpret_cast<float4*>(x) = *reinterpret_cast<const float4*>(sm.A + r * kLdC + s0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int s = s0 + j;
            x[j] = pair_on(m, r, s, false) ? scale * x[j] * expf(m.gam[r] - m.gam[s]) : 0.0f;
        }
        cuda::store4(aqk + r * kC + s0, x);
    });
}

// sA = strict_lower_same(diag(beta) S * E) in place, from S = Kn Kn^T.
__device__ void mask_a(PrepSmem& sm) {
    const ChunkMeta& m = sm.meta;
    for_each_quad([&](int r, int s0) {
        float4& q = *reinterpret_cast<float4*>(sm.A + r * kLdC + s0);
        float x[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int s = s0 + j;
            x[j] = pair_on(m, r, s, true) ? m.beta[r] * x[j] * expf(m.gam[r] - m.gam[s]) : 0.0f;
        }
        q = make_float4(x[0], x[1], x[2], x[3]);
    });
}

// sTs = T diag(col) in bf16 (stride kLdBS), col[s] = beta[s] (times exp(Gamma) f with `gated`);
// with t_out, T itself to global (bf16) as well.
__device__ void scale_t(__nv_bfloat16* sTs, const PrepSmem& sm, bool gated, __nv_bfloat16* t_out) {
    const ChunkMeta& m = sm.meta;
    for_each_quad([&](int r, int s0) {
        float t[4], x[4];
        *reinterpret_cast<float4*>(t) = *reinterpret_cast<const float4*>(sm.T + r * kLdC + s0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int s = s0 + j;
            x[j] = t[j] * m.beta[s] * (gated ? m.eg[s] * m.f[s] : 1.0f);
        }
        cuda::store4(sTs + r * kLdBS + s0, x);
        if (t_out) cuda::store4(t_out + r * kC + s0, t);
    });
}

// One block per chunk and value head: Aqk, Qd, Kd, T = (I + A)^-1, W and U (see
// gdn_chunked_rule.cu), all bf16 in the workspace. Products on bf16 tiles as FLA's kernels keep
// them; masks, gates and the inverse in fp32.
__global__ void __launch_bounds__(kThreads, 3)
    gdn_chunk_prep_kernel(Ws ws, const __nv_bfloat16* q, const __nv_bfloat16* k,
                          const __nv_bfloat16* v, int64_t ldqk, int64_t ldv, const __nv_bfloat16* a,
                          const __nv_bfloat16* b, const float* A_log, const float* dt_bias,
                          const int32_t* cu, int64_t num_docs, int32_t tokens, int k_heads,
                          int v_heads, float scale) {
    extern __shared__ __align__(128) float smem[];
    PrepSmem& sm = *reinterpret_cast<PrepSmem*>(smem);
    float* sA = sm.A;
    float* sT = sm.T;
    __nv_bfloat16* sTs = reinterpret_cast<__nv_bfloat16*>(sm.A);
    ChunkMeta& m = sm.meta;
    const int c = blockIdx.x, h = blockIdx.y;
    const int32_t c0 = c * kC;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    load_chunk<kThreads / 32>(m, sm.QV, sm.K, q, k, ldqk, a, b, A_log, dt_bias, cu, num_docs,
                              tokens, k_heads, v_heads, h, c);
    // Aqk = scale lower_same(Qn Kn^T * E), Qd, Kd.
    mm_bf16<kN, kT, kC, kC, kD, kLdB, kLdB, kLdC, kThreads / 32, kPrepTileDiv>(sA, sm.QV, sm.K,
                                                                               1.0f, 0.0f);
    store_qd_kd(sm, ws, tile, scale);
    __syncthreads();
    copy_rows<kThreads, kC, kD, kLdB>(sm.QV, v + static_cast<int64_t>(c0) * ldv + h * kD, ldv,
                                      tokens - c0);
    store_aqk(sm, ws.Aqk + tile * kSquare, scale);
    __syncthreads();
    // A = strict_lower_same(diag(beta) Kn Kn^T * E), T = (I + A)^-1.
    mm_bf16<kN, kT, kC, kC, kD, kLdB, kLdB, kLdC, kThreads / 32, kPrepTileDiv>(sA, sm.K, sm.K, 1.0f,
                                                                               0.0f);
    __syncthreads();
    mask_a(sm);
    __syncthreads();
    invert_unit_lower(sT, sA, sm.scratch);
    // W = (T diag(beta exp(Gamma) f)) Kn, U = (T diag(beta)) V; sTs holds the scaled T.
    scale_t(sTs, sm, true, ws.T + tile * kSquare);
    __syncthreads();
    mm_bf16<kN, kN, kC, kD, kC, kLdBS, kLdB, kD, kThreads / 32, kPrepTileDiv>(
        ws.W + tile * kTile, sTs, sm.K, 1.0f, 0.0f);
    __syncthreads();
    scale_t(sTs, sm, false, nullptr);
    copies_wait();
    __syncthreads();
    mm_bf16<kN, kN, kC, kD, kC, kLdBS, kLdB, kD, kThreads / 32, kPrepTileDiv>(
        ws.U + tile * kTile, sTs, sm.QV, 1.0f, 0.0f);
    if (threadIdx.x == 0) ws.gam[tile] = m.f[m.last] * expf(m.gam[m.last]);
}

template <typename F>
cudaError_t set_smem(F* kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(bytes));
}

// Elements from one token's row to the next of a (tokens, heads, kD) operand: the caller's
// stride (qkv_stride, dqkv_stride), or 0 for dense rows.
int64_t row_stride(int64_t given, int64_t heads) {
    return given ? given : heads * kD;
}

// A row stride the kernels' 16-byte loads and stores allow for rows `width` elements wide.
bool stride_ok(int64_t stride, int64_t width) {
    return stride == 0 || (stride >= width && stride % 8 == 0);
}

bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The shapes the kernels serve (gated_delta_rule_supported), at least one document, and q, k, v
// rows the vector loads can read.
bool args_supported(const GatedDeltaRuleArgs& x) {
    return gated_delta_rule_supported(x.tokens, x.k_heads, x.v_heads, kD, kD) && x.num_docs >= 1 &&
           stride_ok(x.qkv_stride, std::max(x.k_heads, x.v_heads) * kD) && aligned16(x.q) &&
           aligned16(x.k) && aligned16(x.v);
}

cudaError_t launch_prep(const Ws& w, const GatedDeltaRuleArgs& x, cudaStream_t stream) {
    if (cudaError_t e = set_smem(gdn_chunk_prep_kernel, kPrepSmem); e != cudaSuccess) return e;
    if (cudaError_t e = cudaFuncSetAttribute(gdn_chunk_prep_kernel,
                                             cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared);
        e != cudaSuccess) {
        return e;
    }
    const dim3 grid(static_cast<unsigned>(num_chunks(x.tokens)), static_cast<unsigned>(x.v_heads));
    gdn_chunk_prep_kernel<<<grid, kThreads, kPrepSmem, stream>>>(
        w, x.q, x.k, x.v, row_stride(x.qkv_stride, x.k_heads), row_stride(x.qkv_stride, x.v_heads),
        x.a, x.b, x.A_log, x.dt_bias, x.cu_seqlens, x.num_docs, static_cast<int32_t>(x.tokens),
        static_cast<int>(x.k_heads), static_cast<int>(x.v_heads), x.scale);
    return cudaGetLastError();
}

}  // namespace
}  // namespace deltatune
