// Shared by gated_delta_rule.cu (forward) and gated_delta_rule_backward.cu: the chunk geometry,
// the workspace layout (Ws, carve), and the two kernels the backward
// replays (chunk_prep and the forward recurrence) with their launchers. Everything is in an
// anonymous namespace: each translation unit compiles its own copy of these device functions.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/tile_mma.cuh"
#include "kernels/common/varlen.cuh"
#include "kernels/gated_delta_rule.h"

namespace deltatune {
namespace {

using cuda::kN;
using cuda::kT;
using cuda::kTf32;
using cuda::mm;

constexpr int kD = 128;  // dk = dv
constexpr int kC = 64;   // chunk
constexpr int kThreads = 256;
constexpr float kNormEps = 1e-6f;
constexpr float kSoftplusThreshold = 20.0f;

constexpr int64_t kTile = int64_t{kC} * kD;    // one chunk-head (64 x 128) fp32 tile
constexpr int64_t kSquare = int64_t{kC} * kC;  // one chunk-head (64 x 64) tile
constexpr int64_t kState = int64_t{kD} * kD;   // one chunk-head state

// Shared-memory row strides, by how the products read an operand. A fragment load touches rows
// g (0-7) at column t (0-3) of an operand stored m x k (a plain A, a transposed B), or rows t at
// column g of one stored k x n (a transposed A, a plain B; C's float2 rows likewise): rows 4 banks
// apart serve the first without conflicts (4g + t), rows 8 banks apart the second (8t + g).
constexpr int kLdK = kD + 4;   // kC x kD tiles and kD x kD states
constexpr int kLdC = kC + 4;   // kC x kC
constexpr int kLdKT = kD + 8;  // kC x kD tiles read as k x n
constexpr int kSTile = kC * kLdK;
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

// Four consecutive values of a shared-memory row, fp32 or rounded to bf16.
__device__ __forceinline__ void store_row4(float* p, const float (&f)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
}
__device__ __forceinline__ void store_row4(__nv_bfloat16* p, const float (&f)[4]) {
    cuda::store4(p, f);
}

// Fills meta (gates, documents, Gamma, masks) for chunk c of value head h and loads the
// L2-normalised q, k rows of its key head into sQ, sK (kC x kD, stride kLd, fp32 or bf16, zero
// past the end); ldqk: elements from one token's q (and k) row to the next.
// Each lane holds 4 consecutive channels of a row; a warp issues all its rows' loads before the
// first reduction, so they overlap.
template <int kWarps = kThreads / 32, int kLd = kLdK, typename TS = float>
__device__ void load_chunk(ChunkMeta& m, TS* sQ, TS* sK, const __nv_bfloat16* q,
                           const __nv_bfloat16* k, int64_t ldqk, const __nv_bfloat16* a,
                           const __nv_bfloat16* b, const float* A_log, const float* dt_bias,
                           const int32_t* cu, int64_t num_docs, int32_t tokens, int k_heads,
                           int v_heads, int h, int c) {
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
        store_row4(sQ + r * kLd + lane * 4, qn);
        store_row4(sK + r * kLd + lane * 4, kn);
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
    for (int i = 1; i < 4; ++i) {
        // P_j = sum_{m=j}^{i-1} A_im T_mj for j < i, then T_ij = -T_ii P_j.
        for (int n = threadIdx.x; n < i * 256; n += blockDim.x) {
            const int j = n / 256, r = (n % 256) / 16, col = n % 16;
            float p = 0.0f;
            for (int s = j * 16; s < i * 16; ++s) {
                p += sA[(i * 16 + r) * kLdC + s] * sT[s * kLdC + j * 16 + col];
            }
            scratch[n] = p;
        }
        __syncthreads();
        for (int n = threadIdx.x; n < i * 256; n += blockDim.x) {
            const int j = n / 256, r = (n % 256) / 16, col = n % 16;
            float t = 0.0f;
            for (int s = 0; s <= r; ++s) {
                t += sT[(i * 16 + r) * kLdC + i * 16 + s] * scratch[j * 256 + s * 16 + col];
            }
            sT[(i * 16 + r) * kLdC + j * 16 + col] = -t;
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

// Starts copying a rows x cols fp32 tile (cols % 4 == 0) from global (stride lds) to shared
// memory (stride ldd).
__device__ __forceinline__ void copy_tile(float* dst, int ldd, const float* src, int lds, int rows,
                                          int cols) {
    const int q = cols / 4;
    for (int i = threadIdx.x; i < rows * q; i += blockDim.x) {
        const int r = i / q, c = (i % q) * 4;
        cp_async16(dst + r * ldd + c, src + static_cast<int64_t>(r) * lds + c);
    }
}

// The same for a bf16 tile (cols % 8 == 0).
__device__ __forceinline__ void copy_tile(__nv_bfloat16* dst, int ldd, const __nv_bfloat16* src,
                                          int lds, int rows, int cols) {
    const int q = cols / 8;
    for (int i = threadIdx.x; i < rows * q; i += blockDim.x) {
        const int r = i / q, c = (i % q) * 8;
        cp_async16(dst + r * ldd + c, src + static_cast<int64_t>(r) * lds + c);
    }
}

// kRows rows x kCols bf16 from global (row stride `stride` elements, 16-byte aligned) into fp32
// shared memory of stride kLd; rows at or past `valid` read 0. All loads are issued before the
// first store.
template <int kCols, int kLd, int kBlock = kThreads, int kRows = kC>
__device__ __forceinline__ void load_bf16_rows(float* dst, const __nv_bfloat16* src, int64_t stride,
                                               int valid) {
    constexpr int kVecPerRow = kCols / 8;
    constexpr int kPer = kRows * kVecPerRow / kBlock;
    static_assert(kPer >= 1 && kRows * kVecPerRow % kBlock == 0);
    uint4 raw[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int i = threadIdx.x + j * kBlock;
        const int r = i / kVecPerRow, c = (i % kVecPerRow) * 8;
        raw[j] = r < valid ? *reinterpret_cast<const uint4*>(src + r * stride + c)
                           : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int i = threadIdx.x + j * kBlock;
        const int r = i / kVecPerRow, c = (i % kVecPerRow) * 8;
        float f[8];
        cuda::unpack8(*reinterpret_cast<const cuda::Bf16x8*>(&raw[j]), f);
        *reinterpret_cast<float4*>(dst + r * kLd + c) = make_float4(f[0], f[1], f[2], f[3]);
        *reinterpret_cast<float4*>(dst + r * kLd + c + 4) = make_float4(f[4], f[5], f[6], f[7]);
    }
}

// Writes a kC x kD shared tile (stride kLdK) to global (stride kD), 16 bytes at a time.
__device__ __forceinline__ void store_tile(float* dst, const float* src) {
    for (int i = threadIdx.x; i < kC * kD / 4; i += blockDim.x) {
        const int r = i / (kD / 4), c = (i % (kD / 4)) * 4;
        *reinterpret_cast<float4*>(dst + r * kD + c) =
            *reinterpret_cast<const float4*>(src + r * kLdK + c);
    }
}

// Warp tiles of the chunk kernels' products (see mm): measured per kernel on the 27B layer.
constexpr int kPrepTileDiv = 4;

// Shared memory of chunk_prep; small enough for two blocks per multiprocessor. Its size is the
// launch's (kPrepSmem), so the layout and the launch cannot disagree.
struct PrepSmem {
    float K[kSTile];       // kC x kD, stride kLdK
    float QV[kC * kLdKT];  // Q (stride kLdK), then V (kLdKT)
    float A[kSSquare];     // kC x kC, stride kLdC
    float T[kSSquare];
    float scratch[3 * 256];
    ChunkMeta meta;
};
constexpr size_t kPrepSmem = sizeof(PrepSmem);
static_assert(2 * kPrepSmem <= 227 * 1024, "two chunk_prep blocks per multiprocessor");

__global__ void __launch_bounds__(kThreads, 2)
    gdn_chunk_prep_kernel(Ws ws, const __nv_bfloat16* q, const __nv_bfloat16* k,
                          const __nv_bfloat16* v, int64_t ldqk, int64_t ldv, const __nv_bfloat16* a,
                          const __nv_bfloat16* b, const float* A_log, const float* dt_bias,
                          const int32_t* cu, int64_t num_docs, int32_t tokens, int k_heads,
                          int v_heads, float scale) {
    extern __shared__ __align__(128) float smem[];
    PrepSmem& sm = *reinterpret_cast<PrepSmem*>(smem);
    float* sK = sm.K;
    float* sQV = sm.QV;
    float* sA = sm.A;
    float* sT = sm.T;
    float* scratch = sm.scratch;
    ChunkMeta& m = sm.meta;
    const int c = blockIdx.x, h = blockIdx.y;
    const int32_t c0 = c * kC;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    load_chunk(m, sQV, sK, q, k, ldqk, a, b, A_log, dt_bias, cu, num_docs, tokens, k_heads, v_heads,
               h, c);
    // Aqk = scale lower_same(Qn Kn^T * E), Qd, Kd. W, Qd, Kd, Aqk and T are stored in bf16 (only
    // products read them).
    mm<kN, kT, kC, kC, kD, kLdK, kLdK, kLdC, kThreads / 32, kPrepTileDiv>(sA, sQV, sK, 1.0f, 0.0f);
    for (int n = threadIdx.x; n < kTile / 4; n += blockDim.x) {
        const int r = n / (kD / 4), col = (n % (kD / 4)) * 4;
        const float sq = scale * m.eg[r] * m.f[r], sk = m.l[r] * m.el[r];
        const float4 qv = *reinterpret_cast<const float4*>(sQV + r * kLdK + col);
        const float4 kv = *reinterpret_cast<const float4*>(sK + r * kLdK + col);
        const float qd[4] = {sq * qv.x, sq * qv.y, sq * qv.z, sq * qv.w};
        const float kd[4] = {sk * kv.x, sk * kv.y, sk * kv.z, sk * kv.w};
        cuda::store4(ws.Qd + tile * kTile + r * kD + col, qd);
        cuda::store4(ws.Kd + tile * kTile + r * kD + col, kd);
    }
    __syncthreads();
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        ws.Aqk[tile * kSquare + n] = __float2bfloat16_rn(
            pair_on(m, r, s, false) ? scale * sA[r * kLdC + s] * expf(m.gam[r] - m.gam[s]) : 0.0f);
    }
    __syncthreads();
    // A = strict_lower_same(diag(beta) Kn Kn^T * E), T = (I + A)^-1.
    load_bf16_rows<kD, kLdKT>(sQV, v + static_cast<int64_t>(c0) * ldv + h * kD, ldv, tokens - c0);
    mm<kN, kT, kC, kC, kD, kLdK, kLdK, kLdC, kThreads / 32, kPrepTileDiv>(sA, sK, sK, 1.0f, 0.0f);
    __syncthreads();
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        float& x = sA[r * kLdC + s];
        x = pair_on(m, r, s, true) ? m.beta[r] * x * expf(m.gam[r] - m.gam[s]) : 0.0f;
    }
    __syncthreads();
    invert_unit_lower(sT, sA, scratch);
    // W = (T diag(beta exp(Gamma) f)) Kn, U = (T diag(beta)) V; sA holds the scaled T.
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        sA[r * kLdC + s] = sT[r * kLdC + s] * m.beta[s] * m.eg[s] * m.f[s];
        ws.T[tile * kSquare + n] = __float2bfloat16_rn(sT[r * kLdC + s]);
    }
    __syncthreads();
    mm<kN, kN, kC, kD, kC, kLdC, kLdK, kD, kThreads / 32, kPrepTileDiv>(ws.W + tile * kTile, sA, sK,
                                                                        1.0f, 0.0f);
    __syncthreads();
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        sA[r * kLdC + s] = sT[r * kLdC + s] * m.beta[s];
    }
    __syncthreads();
    mm<kN, kTf32, kC, kD, kC, kLdC, kLdKT, kD, kThreads / 32, kPrepTileDiv>(ws.U + tile * kTile, sA,
                                                                            sQV, 1.0f, 0.0f);
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

#include "kernels/gated_delta_rule_recurrence.cuh"

namespace deltatune {
namespace {

// The forward's two launches: chunk_prep into `w`, then the recurrence writing `out` (when set)
// and, with save_states, each chunk's entering state and Vn for the backward.
cudaError_t launch_forward(__nv_bfloat16* out, bool save_states, const Ws& w,
                           const GatedDeltaRuleArgs& x, cudaStream_t stream) {
    if (cudaError_t e = launch_prep(w, x, stream); e != cudaSuccess) return e;
    return launch_recurrence(out, w, x.tokens, x.v_heads, save_states, stream);
}

}  // namespace
}  // namespace deltatune
