// Chunked gated delta rule (chunk 64, dk = dv = 128) with the gates and the q/k L2 norm fused,
// forward and backward, in the WY/UT form of flash-linear-attention's chunk_gated_delta_rule.
//
// Chunks are fixed 64-token windows of the packed stream. Inside chunk c (rows r, s), with
// Gamma = the chunk-local cumulative sum of g, E[r,s] = exp(Gamma_r - Gamma_s), same(r,s) = same
// document, f_r = "row r continues the document that was running before the chunk", l_s = "row s
// is in the chunk's last document":
//   A   = strict_lower_same(diag(beta) Kn Kn^T * E),  T = (I + A)^-1
//   W   = T diag(beta exp(Gamma) f) Kn,  U = T diag(beta) V
//   Qd  = scale diag(exp(Gamma) f) Qn,   Kd = diag(exp(Gamma_L - Gamma) l) Kn
//   Aqk = scale lower_same(Qn Kn^T * E),  gam = f_L exp(Gamma_L)        (L = last valid row)
// and the sequential part over chunks, with the running state S (dk x dv):
//   Vn = U - W S;  O = Qd S + Aqk Vn;  S <- gam S + Kd^T Vn.
// A row whose document started inside the chunk has f = 0, so it never reads the previous state,
// and the state leaving a chunk holds only its last document: the reset needs no extra work.
//
// Kernels: chunk_prep (parallel over chunks and heads) writes W, U, Qd, Kd, Aqk, T and gam; the
// recurrence runs per (value head, 32-column slice of dv) over all chunks. The backward recomputes
// both (the recurrence also saving every chunk's entering state and Vn), runs the reverse
// recurrence for dVn and each chunk's leaving-state gradient, then per chunk forms the gradients
// of W, Qd, Kd, Aqk and gam (state_grads) and pushes them back through T, the masks, the gates
// and the L2 norm (chunk_prep_backward, qk_finalize, gate_reduce). All matrix products are
// tensor-core tf32 (mma.sync m16n8k8) on fp32 shared memory; every reduction has a fixed order.
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/varlen.cuh"
#include "kernels/gated_delta_rule.h"

namespace deltatune {

namespace {

constexpr int kD = 128;  // dk = dv
constexpr int kC = 64;   // chunk
constexpr int kBV = 32;  // dv columns per recurrence block
constexpr int kThreads = 256;
constexpr float kNormEps = 1e-6f;
constexpr float kSoftplusThreshold = 20.0f;

constexpr int64_t kTile = int64_t{kC} * kD;    // one chunk-head (64 x 128) fp32 tile
constexpr int64_t kSquare = int64_t{kC} * kC;  // one chunk-head (64 x 64) tile
constexpr int64_t kState = int64_t{kD} * kD;   // one chunk-head state

// Shared-memory row strides, padded by 16 bytes so the rows of a tensor-core fragment load fall
// in different banks.
constexpr int kLdK = kD + 4;   // kC x kD tiles and kD x kD states
constexpr int kLdC = kC + 4;   // kC x kC
constexpr int kLdV = kBV + 4;  // kC x kBV and kD x kBV slices
constexpr int kSTile = kC * kLdK;
constexpr int kSSquare = kC * kLdC;

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// d += a b on one m16n8k8 tf32 tensor-core tile (PTX fragment layouts, g = lane / 4, t = lane % 4:
// a {(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)}, b {(t, g), (t + 4, g)}, d {(g, 2t),
// (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)}).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// C (M x N, stride LDC) = beta C + alpha op(A) op(B), op(A): M x K, op(B): K x N. TA: A is stored
// K x M row-major (op(A) = A^T); TB: B is stored N x K. M, N multiples of 16, K of 8. Each warp
// owns whole output tiles (32 x 32 when there are enough for every warp, else 16 x 16) in a fixed
// order, and every thread reads back (beta != 0) only the C elements it wrote itself in an
// earlier call of the same shape; C may be global memory. Callers put barriers around shared
// operands written by other threads.
template <bool TA, bool TB, int M, int N, int K, int LDA, int LDB, int LDC>
__device__ __forceinline__ void mm(float* C, const float* A, const float* B, float alpha,
                                   float beta) {
    static_assert(M % 16 == 0 && N % 16 == 0 && K % 8 == 0 && LDC % 2 == 0);
    constexpr int kWarpCount = kThreads / 32;
    constexpr bool kBig = M % 32 == 0 && N % 32 == 0 && (M / 32) * (N / 32) >= kWarpCount;
    constexpr int kFm = kBig ? 2 : 1;  // m16 blocks per warp tile
    constexpr int kFn = kBig ? 4 : 2;  // n8 blocks per warp tile
    constexpr int kTn = N / (8 * kFn), kTiles = (M / (16 * kFm)) * kTn;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    for (int tile = warp; tile < kTiles; tile += kWarpCount) {
        const int m0 = (tile / kTn) * 16 * kFm, n0 = (tile % kTn) * 8 * kFn;
        float acc[kFm][kFn][4] = {};
#pragma unroll
        for (int k0 = 0; k0 < K; k0 += 8) {
            uint32_t a[kFm][4], b[kFn][2];
#pragma unroll
            for (int fm = 0; fm < kFm; ++fm) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int m = m0 + fm * 16 + g + (i & 1) * 8, k = k0 + t + (i >> 1) * 4;
                    a[fm][i] = to_tf32(TA ? A[k * LDA + m] : A[m * LDA + k]);
                }
            }
#pragma unroll
            for (int fn = 0; fn < kFn; ++fn) {
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int k = k0 + t + i * 4, n = n0 + fn * 8 + g;
                    b[fn][i] = to_tf32(TB ? B[n * LDB + k] : B[k * LDB + n]);
                }
            }
#pragma unroll
            for (int fm = 0; fm < kFm; ++fm) {
#pragma unroll
                for (int fn = 0; fn < kFn; ++fn) mma_tf32(acc[fm][fn], a[fm], b[fn]);
            }
        }
#pragma unroll
        for (int fm = 0; fm < kFm; ++fm) {
#pragma unroll
            for (int fn = 0; fn < kFn; ++fn) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    auto* p = reinterpret_cast<float2*>(C + (m0 + fm * 16 + g + h * 8) * LDC + n0 +
                                                        fn * 8 + 2 * t);
                    float2 v =
                        make_float2(alpha * acc[fm][fn][2 * h], alpha * acc[fm][fn][2 * h + 1]);
                    if (beta != 0.0f) {
                        const float2 o = *p;
                        v.x += beta * o.x;
                        v.y += beta * o.y;
                    }
                    *p = v;
                }
            }
        }
    }
}

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

constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = kC / kWarps;

__device__ __forceinline__ void unpack4(const uint2& raw, float (&f)[4]) {
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    f[0] = lo.x;
    f[1] = lo.y;
    f[2] = hi.x;
    f[3] = hi.y;
}

// Fills meta (gates, documents, Gamma, masks) for chunk c of value head h and loads the
// L2-normalised q, k rows of its key head into sQ, sK (kC x kD, stride kLdK, zero past the end).
// Each lane holds 4 consecutive channels of a row; a warp issues all its rows' loads before the
// first reduction, so they overlap.
__device__ void load_chunk(ChunkMeta& m, float* sQ, float* sK, const __nv_bfloat16* q,
                           const __nv_bfloat16* k, const __nv_bfloat16* a, const __nv_bfloat16* b,
                           const float* A_log, const float* dt_bias, const int32_t* cu,
                           int64_t num_docs, int32_t tokens, int k_heads, int v_heads, int h,
                           int c) {
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
            const int64_t o = (static_cast<int64_t>(t) * k_heads + kh) * kD + lane * 4;
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
        unpack4(qraw[j], qf);
        unpack4(kraw[j], kf);
        float sq = 0.0f, sk = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sq += qf[i] * qf[i];
            sk += kf[i] * kf[i];
        }
        const float rq = rsqrtf(cuda::warp_sum(sq) + kNormEps);
        const float rk = rsqrtf(cuda::warp_sum(sk) + kNormEps);
        *reinterpret_cast<float4*>(sQ + r * kLdK + lane * 4) =
            make_float4(qf[0] * rq, qf[1] * rq, qf[2] * rq, qf[3] * rq);
        *reinterpret_cast<float4*>(sK + r * kLdK + lane * 4) =
            make_float4(kf[0] * rk, kf[1] * rk, kf[2] * rk, kf[3] * rk);
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

// Workspace views (fp32 unless noted), [chunk][v_head] tiles.
struct Ws {
    float *W, *U, *Qd, *Kd, *Aqk, *T, *gam;                                          // forward
    float *h, *dh, *Vn, *dVn, *dQd, *dW, *dKd, *dAqk, *dgam, *dQn, *dKn, *pA, *pdt;  // backward
};

__host__ __device__ inline int64_t num_chunks(int64_t tokens) {
    return (tokens + kC - 1) / kC;
}

Ws carve(void* base, int64_t tokens, int64_t v_heads, bool backward, size_t* bytes) {
    const int64_t n = num_chunks(tokens) * v_heads;
    char* p = static_cast<char*>(base);
    size_t off = 0;
    auto take = [&](int64_t floats) {
        float* r = reinterpret_cast<float*>(p + off);
        off += (static_cast<size_t>(floats) * sizeof(float) + 255) / 256 * 256;
        return r;
    };
    Ws w{};
    w.W = take(n * kTile);
    w.U = take(n * kTile);
    w.Qd = take(n * kTile);
    w.Kd = take(n * kTile);
    w.Aqk = take(n * kSquare);
    w.T = take(n * kSquare);
    w.gam = take(n);
    if (backward) {
        w.h = take(n * kState);
        w.dh = take(n * kState);
        w.Vn = take(n * kTile);
        w.dVn = take(n * kTile);
        w.dQd = take(n * kTile);
        w.dW = take(n * kTile);
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

// kernels

// Asynchronous 16-byte global-to-shared copies (cp.async): every load of a tile is in flight at
// once. Readers call copies_wait() and then a barrier.
__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
    const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}

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

// kC rows x kCols bf16 from global (row stride `stride` elements, 16-byte aligned) into fp32
// shared memory of stride kLd; rows at or past `valid` read 0. All loads are issued before the
// first store.
template <int kCols, int kLd>
__device__ __forceinline__ void load_bf16_rows(float* dst, const __nv_bfloat16* src, int64_t stride,
                                               int valid) {
    constexpr int kVecPerRow = kCols / 8;
    constexpr int kPer = kC * kVecPerRow / kThreads;
    static_assert(kPer >= 1 && kC * kVecPerRow % kThreads == 0);
    uint4 raw[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int i = threadIdx.x + j * kThreads;
        const int r = i / kVecPerRow, c = (i % kVecPerRow) * 8;
        raw[j] = r < valid ? *reinterpret_cast<const uint4*>(src + r * stride + c)
                           : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int i = threadIdx.x + j * kThreads;
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

// Shared memory of chunk_prep: sK, sQV (Q, then V) (kC x kD), sA, sT (kC x kC), scratch, meta;
// small enough for two blocks per multiprocessor.
constexpr size_t kPrepSmem =
    sizeof(float) * (2 * kSTile + 2 * kSSquare + 3 * 256) + sizeof(ChunkMeta);

__global__ void __launch_bounds__(kThreads, 2)
    gdn_chunk_prep_kernel(Ws ws, const __nv_bfloat16* q, const __nv_bfloat16* k,
                          const __nv_bfloat16* v, const __nv_bfloat16* a, const __nv_bfloat16* b,
                          const float* A_log, const float* dt_bias, const int32_t* cu,
                          int64_t num_docs, int32_t tokens, int k_heads, int v_heads, float scale) {
    extern __shared__ __align__(128) float smem[];
    float* sK = smem;
    float* sQV = sK + kSTile;
    float* sA = sQV + kSTile;
    float* sT = sA + kSSquare;
    float* scratch = sT + kSSquare;
    ChunkMeta& m = *reinterpret_cast<ChunkMeta*>(scratch + 3 * 256);
    const int c = blockIdx.x, h = blockIdx.y;
    const int32_t c0 = c * kC;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    load_chunk(m, sQV, sK, q, k, a, b, A_log, dt_bias, cu, num_docs, tokens, k_heads, v_heads, h,
               c);
    // Aqk = scale lower_same(Qn Kn^T * E), Qd, Kd.
    mm<false, true, kC, kC, kD, kLdK, kLdK, kLdC>(sA, sQV, sK, 1.0f, 0.0f);
    for (int n = threadIdx.x; n < kTile / 4; n += blockDim.x) {
        const int r = n / (kD / 4), col = (n % (kD / 4)) * 4;
        const float sq = scale * m.eg[r] * m.f[r], sk = m.l[r] * m.el[r];
        const float4 qv = *reinterpret_cast<const float4*>(sQV + r * kLdK + col);
        const float4 kv = *reinterpret_cast<const float4*>(sK + r * kLdK + col);
        *reinterpret_cast<float4*>(ws.Qd + tile * kTile + r * kD + col) =
            make_float4(sq * qv.x, sq * qv.y, sq * qv.z, sq * qv.w);
        *reinterpret_cast<float4*>(ws.Kd + tile * kTile + r * kD + col) =
            make_float4(sk * kv.x, sk * kv.y, sk * kv.z, sk * kv.w);
    }
    __syncthreads();
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        ws.Aqk[tile * kSquare + n] =
            pair_on(m, r, s, false) ? scale * sA[r * kLdC + s] * expf(m.gam[r] - m.gam[s]) : 0.0f;
    }
    __syncthreads();
    // A = strict_lower_same(diag(beta) Kn Kn^T * E), T = (I + A)^-1.
    load_bf16_rows<kD, kLdK>(sQV, v + (static_cast<int64_t>(c0) * v_heads + h) * kD,
                             int64_t{v_heads} * kD, tokens - c0);
    mm<false, true, kC, kC, kD, kLdK, kLdK, kLdC>(sA, sK, sK, 1.0f, 0.0f);
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
        ws.T[tile * kSquare + n] = sT[r * kLdC + s];
    }
    __syncthreads();
    mm<false, false, kC, kD, kC, kLdC, kLdK, kD>(ws.W + tile * kTile, sA, sK, 1.0f, 0.0f);
    __syncthreads();
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        sA[r * kLdC + s] = sT[r * kLdC + s] * m.beta[s];
    }
    __syncthreads();
    mm<false, false, kC, kD, kC, kLdC, kLdK, kD>(ws.U + tile * kTile, sA, sQV, 1.0f, 0.0f);
    if (threadIdx.x == 0) ws.gam[tile] = m.f[m.last] * expf(m.gam[m.last]);
}

// Shared memory of the recurrences: state slice (kD x kBV), three kC x kD tiles, one kC x kC,
// two kC x kBV.
constexpr size_t kRecSmem = sizeof(float) * (kD * kLdV + 3 * kSTile + kSSquare + 2 * kC * kLdV);

// Forward recurrence for value head blockIdx.x, dv columns [v0, v0 + kBV). save_states: write
// each chunk's entering state and Vn (every row, zero past the end) instead of the output. Each
// chunk's operands are copied in while the previous chunk still computes: a buffer's next copy
// starts as soon as the barrier after its last reader has passed.
__global__ void __launch_bounds__(kThreads)
    gdn_recurrence_forward_kernel(__nv_bfloat16* out, Ws ws, int32_t tokens, int v_heads,
                                  bool save_states) {
    extern __shared__ __align__(128) float smem[];
    float* sS = smem;
    float* sW = sS + kD * kLdV;
    float* sQd = sW + kSTile;
    float* sKd = sQd + kSTile;
    float* sAqk = sKd + kSTile;
    float* sVn = sAqk + kSSquare;
    float* sO = sVn + kC * kLdV;
    const int h = blockIdx.x;
    const int v0 = blockIdx.y * kBV;
    for (int n = threadIdx.x; n < kD * kLdV; n += blockDim.x) sS[n] = 0.0f;
    __syncthreads();  // the first chunk reads the zeros with another thread mapping
    const int chunks = static_cast<int>(num_chunks(tokens));
    auto tile_of = [&](int c) { return static_cast<int64_t>(c) * v_heads + h; };
    {
        const int64_t tile = tile_of(0);
        copy_tile(sW, kLdK, ws.W + tile * kTile, kD, kC, kD);
        copy_tile(sKd, kLdK, ws.Kd + tile * kTile, kD, kC, kD);
        copy_tile(sVn, kLdV, ws.U + tile * kTile + v0, kD, kC, kBV);
        if (!save_states) {
            copy_tile(sQd, kLdK, ws.Qd + tile * kTile, kD, kC, kD);
            copy_tile(sAqk, kLdC, ws.Aqk + tile * kSquare, kC, kC, kC);
        }
    }
    for (int c = 0; c < chunks; ++c) {
        const int64_t tile = tile_of(c);
        const bool more = c + 1 < chunks;
        const int64_t next = tile_of(c + 1);
        if (save_states) {
            for (int n = threadIdx.x; n < kD * kBV / 4; n += blockDim.x) {
                const int r = n / (kBV / 4), col = (n % (kBV / 4)) * 4;
                *reinterpret_cast<float4*>(ws.h + tile * kState + r * kD + v0 + col) =
                    *reinterpret_cast<const float4*>(sS + r * kLdV + col);
            }
        }
        const float gam = ws.gam[tile];
        copies_wait();
        __syncthreads();
        mm<false, false, kC, kBV, kD, kLdK, kLdV, kLdV>(sVn, sW, sS, -1.0f, 1.0f);  // U - W S
        if (!save_states) {
            mm<false, false, kC, kBV, kD, kLdK, kLdV, kLdV>(sO, sQd, sS, 1.0f, 0.0f);
        }
        __syncthreads();
        if (more) copy_tile(sW, kLdK, ws.W + next * kTile, kD, kC, kD);
        if (!save_states) {
            mm<false, false, kC, kBV, kC, kLdC, kLdV, kLdV>(sO, sAqk, sVn, 1.0f, 1.0f);
        }
        mm<true, false, kD, kBV, kC, kLdK, kLdV, kLdV>(sS, sKd, sVn, 1.0f, gam);
        __syncthreads();
        if (more) {
            copy_tile(sKd, kLdK, ws.Kd + next * kTile, kD, kC, kD);
            if (!save_states) {
                copy_tile(sQd, kLdK, ws.Qd + next * kTile, kD, kC, kD);
                copy_tile(sAqk, kLdC, ws.Aqk + next * kSquare, kC, kC, kC);
            }
        }
        const int32_t c0 = c * kC;
        for (int n = threadIdx.x; n < kC * kBV / 4; n += blockDim.x) {
            const int r = n / (kBV / 4), col = (n % (kBV / 4)) * 4;
            if (save_states) {
                *reinterpret_cast<float4*>(ws.Vn + tile * kTile + r * kD + v0 + col) =
                    *reinterpret_cast<const float4*>(sVn + r * kLdV + col);
            } else if (c0 + r < tokens) {
                const float4 o = *reinterpret_cast<const float4*>(sO + r * kLdV + col);
                __nv_bfloat16* p =
                    out + (static_cast<int64_t>(c0 + r) * v_heads + h) * kD + v0 + col;
                *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(o.x, o.y);
                *reinterpret_cast<__nv_bfloat162*>(p + 2) = __floats2bfloat162_rn(o.z, o.w);
            }
        }
        __syncthreads();
        if (more) copy_tile(sVn, kLdV, ws.U + next * kTile + v0, kD, kC, kBV);
    }
}

// Reverse recurrence: dVn = Aqk^T dO + Kd dS;  dS <- gam dS + Qd^T dO - W^T dVn, where dS is the
// gradient of the state leaving the chunk (saved as dh before the update). Operands of the next
// (earlier) chunk are copied in while this one computes, as in the forward.
__global__ void __launch_bounds__(kThreads)
    gdn_recurrence_backward_kernel(Ws ws, const __nv_bfloat16* dout, int32_t tokens, int v_heads) {
    extern __shared__ __align__(128) float smem[];
    float* sdS = smem;
    float* sW = sdS + kD * kLdV;
    float* sQd = sW + kSTile;
    float* sKd = sQd + kSTile;
    float* sAqk = sKd + kSTile;
    float* sdO = sAqk + kSSquare;
    float* sdVn = sdO + kC * kLdV;
    const int h = blockIdx.x;
    const int v0 = blockIdx.y * kBV;
    for (int n = threadIdx.x; n < kD * kLdV; n += blockDim.x) sdS[n] = 0.0f;
    __syncthreads();  // the first chunk reads the zeros with another thread mapping
    const int chunks = static_cast<int>(num_chunks(tokens));
    auto tile_of = [&](int c) { return static_cast<int64_t>(c) * v_heads + h; };
    auto dout_of = [&](int c) {
        return dout + (static_cast<int64_t>(c) * kC * v_heads + h) * kD + v0;
    };
    {
        const int64_t tile = tile_of(chunks - 1);
        copy_tile(sAqk, kLdC, ws.Aqk + tile * kSquare, kC, kC, kC);
        copy_tile(sKd, kLdK, ws.Kd + tile * kTile, kD, kC, kD);
        copy_tile(sQd, kLdK, ws.Qd + tile * kTile, kD, kC, kD);
        copy_tile(sW, kLdK, ws.W + tile * kTile, kD, kC, kD);
        load_bf16_rows<kBV, kLdV>(sdO, dout_of(chunks - 1), int64_t{v_heads} * kD,
                                  tokens - (chunks - 1) * kC);
    }
    for (int c = chunks - 1; c >= 0; --c) {
        const int64_t tile = tile_of(c);
        const bool more = c > 0;
        const int64_t next = tile_of(c - 1);
        for (int n = threadIdx.x; n < kD * kBV / 4; n += blockDim.x) {
            const int r = n / (kBV / 4), col = (n % (kBV / 4)) * 4;
            *reinterpret_cast<float4*>(ws.dh + tile * kState + r * kD + v0 + col) =
                *reinterpret_cast<const float4*>(sdS + r * kLdV + col);
        }
        const float gam = ws.gam[tile];
        copies_wait();
        __syncthreads();
        mm<true, false, kC, kBV, kC, kLdC, kLdV, kLdV>(sdVn, sAqk, sdO, 1.0f, 0.0f);
        mm<false, false, kC, kBV, kD, kLdK, kLdV, kLdV>(sdVn, sKd, sdS, 1.0f, 1.0f);
        __syncthreads();
        if (more) {
            copy_tile(sAqk, kLdC, ws.Aqk + next * kSquare, kC, kC, kC);
            copy_tile(sKd, kLdK, ws.Kd + next * kTile, kD, kC, kD);
        }
        mm<true, false, kD, kBV, kC, kLdK, kLdV, kLdV>(sdS, sQd, sdO, 1.0f, gam);
        mm<true, false, kD, kBV, kC, kLdK, kLdV, kLdV>(sdS, sW, sdVn, -1.0f, 1.0f);
        for (int n = threadIdx.x; n < kC * kBV / 4; n += blockDim.x) {
            const int r = n / (kBV / 4), col = (n % (kBV / 4)) * 4;
            *reinterpret_cast<float4*>(ws.dVn + tile * kTile + r * kD + v0 + col) =
                *reinterpret_cast<const float4*>(sdVn + r * kLdV + col);
        }
        __syncthreads();
        if (more) {
            copy_tile(sQd, kLdK, ws.Qd + next * kTile, kD, kC, kD);
            copy_tile(sW, kLdK, ws.W + next * kTile, kD, kC, kD);
            load_bf16_rows<kBV, kLdV>(sdO, dout_of(c - 1), int64_t{v_heads} * kD, kC);
        }
    }
}

constexpr size_t kStateGradSmem = sizeof(float) * (2 * kSTile + kD * kLdK + 32);

// Per chunk and value head, from the entering state S and the leaving-state gradient dS:
// dQd = dO S^T, dW = -dVn S^T, dKd = Vn dS^T, dAqk = dO Vn^T, dgam = <S, dS>.
__global__ void __launch_bounds__(kThreads)
    gdn_state_grads_kernel(Ws ws, const __nv_bfloat16* dout, int32_t tokens, int v_heads) {
    extern __shared__ __align__(128) float smem[];
    float* sdO = smem;
    float* sV = sdO + kSTile;
    float* sS = sV + kSTile;
    float* scratch = sS + kD * kLdK;
    const int c = blockIdx.x, h = blockIdx.y;
    const int32_t c0 = c * kC;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    copy_tile(sV, kLdK, ws.dVn + tile * kTile, kD, kC, kD);
    copy_tile(sS, kLdK, ws.h + tile * kState, kD, kD, kD);
    load_bf16_rows<kD, kLdK>(sdO, dout + (static_cast<int64_t>(c0) * v_heads + h) * kD,
                             int64_t{v_heads} * kD, tokens - c0);
    copies_wait();
    __syncthreads();
    mm<false, true, kC, kD, kD, kLdK, kLdK, kD>(ws.dQd + tile * kTile, sdO, sS, 1.0f, 0.0f);
    mm<false, true, kC, kD, kD, kLdK, kLdK, kD>(ws.dW + tile * kTile, sV, sS, -1.0f, 0.0f);
    __syncthreads();
    copy_tile(sV, kLdK, ws.Vn + tile * kTile, kD, kC, kD);
    // dgam = <S, dS>, then dS replaces S; 16 loads in flight per thread.
    constexpr int kPer = kState / 4 / kThreads;
    const float4* dh4 = reinterpret_cast<const float4*>(ws.dh + tile * kState);
    float4 d[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) d[j] = dh4[threadIdx.x + j * kThreads];
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int i = threadIdx.x + j * kThreads;
        float4* p = reinterpret_cast<float4*>(sS + (i / (kD / 4)) * kLdK + (i % (kD / 4)) * 4);
        const float4 s = *p;
        dot += s.x * d[j].x + s.y * d[j].y + s.z * d[j].z + s.w * d[j].w;
        *p = d[j];
    }
    dot = cuda::block_sum(dot, scratch);
    copies_wait();
    __syncthreads();
    mm<false, true, kC, kD, kD, kLdK, kLdK, kD>(ws.dKd + tile * kTile, sV, sS, 1.0f, 0.0f);
    mm<false, true, kC, kC, kD, kLdK, kLdK, kC>(ws.dAqk + tile * kSquare, sdO, sV, 1.0f, 0.0f);
    if (threadIdx.x == 0) ws.dgam[tile] = dot;
}

// Shared memory of chunk_prep_backward: sK, sAcc (dKn), s1, s2 (kC x kD), sT, sX, sY, sZ
// (kC x kC; sY and sZ together also hold one kC x kD tile), dbeta, dGamma, meta.
constexpr size_t kPrepBwdSmem =
    sizeof(float) * (4 * kSTile + 4 * kSSquare + 2 * kC) + sizeof(ChunkMeta);
static_assert(2 * kSSquare >= kSTile);

// acc[i] += sum_j X[i,j] - (with_cols ? sum_j X[j,i] : 0) for a kC x kC matrix of stride kLdC.
// One thread per row, fixed order.
__device__ void add_row_col_sums(float* acc, const float* X, bool with_cols) {
    __syncthreads();
    if (threadIdx.x < kC) {
        const int i = threadIdx.x;
        float s = 0.0f;
        for (int jj = 0; jj < kC; ++jj)
            s += X[i * kLdC + ((jj + i) & (kC - 1))];  // skewed: no bank conflicts
        if (with_cols) {
            for (int j = 0; j < kC; ++j) s -= X[j * kLdC + i];
        }
        acc[i] += s;
    }
    __syncthreads();
}

// out[r] = sum_c X[r,c] Y[r,c] over two kC x kD matrices of stride kLdK (one warp per row).
__device__ void row_dots(float* out, const float* X, const float* Y) {
    const int lane = threadIdx.x & 31;
    for (int r = threadIdx.x >> 5; r < kC; r += blockDim.x >> 5) {
        float s = 0.0f;
        for (int col = lane; col < kD; col += 32) s += X[r * kLdK + col] * Y[r * kLdK + col];
        s = cuda::warp_sum(s);
        if (lane == 0) out[r] = s;
    }
}

__global__ void __launch_bounds__(kThreads)
    gdn_chunk_prep_backward_kernel(Ws ws, __nv_bfloat16* dv, __nv_bfloat16* da, __nv_bfloat16* db,
                                   const __nv_bfloat16* q, const __nv_bfloat16* k,
                                   const __nv_bfloat16* v, const __nv_bfloat16* a,
                                   const __nv_bfloat16* b, const float* A_log, const float* dt_bias,
                                   const int32_t* cu, int64_t num_docs, int32_t tokens, int k_heads,
                                   int v_heads, float scale) {
    extern __shared__ __align__(128) float smem[];
    float* sK = smem;
    float* sAcc = sK + kSTile;  // dKn, written to global at the end
    float* s1 = sAcc + kSTile;
    float* s2 = s1 + kSTile;  // Qn first
    float* sT = s2 + kSTile;
    float* sX = sT + kSSquare;
    float* sY = sX + kSSquare;
    float* sZ = sY + kSSquare;
    float* sYZ = sY;  // sY and sZ as one kC x kD tile (stride kLdK)
    float* dbeta = sZ + kSSquare;
    float* dG = dbeta + kC;
    ChunkMeta& m = *reinterpret_cast<ChunkMeta*>(dG + kC);
    const int c = blockIdx.x, h = blockIdx.y;
    const int32_t c0 = c * kC;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    copy_tile(s1, kLdK, ws.dQd + tile * kTile, kD, kC, kD);
    copy_tile(sT, kLdC, ws.T + tile * kSquare, kC, kC, kC);
    copy_tile(sZ, kLdC, ws.dAqk + tile * kSquare, kC, kC, kC);
    load_chunk(m, s2, sK, q, k, a, b, A_log, dt_bias, cu, num_docs, tokens, k_heads, v_heads, h, c);
    if (threadIdx.x < kC) {
        dbeta[threadIdx.x] = 0.0f;
        dG[threadIdx.x] = 0.0f;
    }
    // Aqk = scale lower_same(Qn Kn^T * E): Z = scale dAqk * E on the mask, H = dAqk * Aqk.
    mm<false, true, kC, kC, kD, kLdK, kLdK, kLdC>(sX, s2, sK, 1.0f, 0.0f);
    copies_wait();
    __syncthreads();
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        const int i = r * kLdC + s;
        if (pair_on(m, r, s, false)) {
            const float z = sZ[i] * scale * expf(m.gam[r] - m.gam[s]);
            sY[i] = z;
            sX[i] = z * sX[i];
        } else {
            sY[i] = 0.0f;
            sX[i] = 0.0f;
        }
    }
    // Qd = scale diag(exp(Gamma) f) Qn: dQn = scale exp(Gamma) f dQd + Z Kn, with the Gamma part
    // from rowsum(dQd * Qn).
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, i = r * kLdK + n % kD;
        s1[i] = m.f[r] != 0.0f ? s1[i] : 0.0f;
    }
    __syncthreads();
    row_dots(dbeta + 0, s1, s2);  // borrowed as scratch: rowsum(dQd * Qn) on f rows
    __syncthreads();
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, i = r * kLdK + n % kD;
        s1[i] *= scale * m.eg[r];
    }
    add_row_col_sums(dG, sX, true);
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        dG[r] += scale * m.eg[r] * dbeta[r];
        dbeta[r] = 0.0f;
    }
    mm<false, false, kC, kD, kC, kLdC, kLdK, kLdK>(s1, sY, sK, 1.0f, 1.0f);   // dQn += Z Kn
    mm<true, false, kC, kD, kC, kLdC, kLdK, kLdK>(sAcc, sY, s2, 1.0f, 0.0f);  // dKn = Z^T Qn
    __syncthreads();
    store_tile(ws.dQn + tile * kTile, s1);
    // Kd = diag(exp(Gamma_L - Gamma) l) Kn.
    __syncthreads();
    copy_tile(s2, kLdK, ws.dKd + tile * kTile, kD, kC, kD);
    copies_wait();
    __syncthreads();
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, i = r * kLdK + n % kD;
        s2[i] = m.l[r] != 0.0f ? s2[i] : 0.0f;
        sAcc[i] += m.el[r] * s2[i];
    }
    __syncthreads();
    row_dots(dbeta, s2, sK);  // scratch again: rowsum(dKd * Kn) on l rows
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum_e = 0.0f;
        for (int r = 0; r < kC; ++r) {
            const float e = m.el[r] * dbeta[r];
            dG[r] -= e;
            sum_e += e;
        }
        dG[m.last] += sum_e + ws.dgam[tile] * m.f[m.last] * expf(m.gam[m.last]);
    }
    __syncthreads();
    if (threadIdx.x < kC) dbeta[threadIdx.x] = 0.0f;
    // U = T diag(beta) V: X = dU V^T, dBv = T^T dU, dV = beta dBv.
    copy_tile(s1, kLdK, ws.dVn + tile * kTile, kD, kC, kD);
    load_bf16_rows<kD, kLdK>(s2, v + (static_cast<int64_t>(c0) * v_heads + h) * kD,
                             int64_t{v_heads} * kD, tokens - c0);
    copies_wait();
    __syncthreads();
    mm<false, true, kC, kC, kD, kLdK, kLdK, kLdC>(sX, s1, s2, 1.0f, 0.0f);
    mm<true, false, kC, kD, kC, kLdC, kLdK, kLdK>(sYZ, sT, s1, 1.0f, 0.0f);
    __syncthreads();
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, col = n % kD;
        const int32_t t = c0 + r;
        if (t < tokens) {
            dv[(static_cast<int64_t>(t) * v_heads + h) * kD + col] =
                __float2bfloat16_rn(m.beta[r] * sYZ[r * kLdK + col]);
        }
    }
    row_dots(dbeta, sYZ, s2);  // dbeta += rowsum(dBv * V) (dbeta was zeroed above)
    __syncthreads();
    // W = T diag(beta exp(Gamma) f) Kn: Y = dW Kn^T, dBk = T^T dW.
    copy_tile(s1, kLdK, ws.dW + tile * kTile, kD, kC, kD);
    copies_wait();
    __syncthreads();
    mm<false, true, kC, kC, kD, kLdK, kLdK, kLdC>(sY, s1, sK, 1.0f, 0.0f);
    mm<true, false, kC, kD, kC, kLdC, kLdK, kLdK>(s2, sT, s1, 1.0f, 0.0f);
    __syncthreads();
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, i = r * kLdK + n % kD;
        if (m.f[r] != 0.0f) sAcc[i] += m.beta[r] * m.eg[r] * s2[i];
    }
    row_dots(sZ, s2, sK);
    __syncthreads();
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        const float w = m.f[r] != 0.0f ? m.eg[r] * sZ[r] : 0.0f;
        dbeta[r] += w;
        dG[r] += w * m.beta[r];
    }
    // dT = X diag(beta) + Y diag(beta exp(Gamma) f);  dA = -T^T dT T^T.
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int s = n % kC, i = (n / kC) * kLdC + s;
        sX[i] = m.beta[s] * (sX[i] + (m.f[s] != 0.0f ? sY[i] * m.eg[s] : 0.0f));
    }
    __syncthreads();
    mm<true, false, kC, kC, kC, kLdC, kLdC, kLdC>(sZ, sT, sX, 1.0f, 0.0f);
    __syncthreads();
    mm<false, true, kC, kC, kC, kLdC, kLdC, kLdC>(sY, sZ, sT, -1.0f, 0.0f);
    mm<false, true, kC, kC, kD, kLdK, kLdK, kLdC>(sX, sK, sK, 1.0f, 0.0f);  // Kn Kn^T
    __syncthreads();
    // A = strict_lower_same(diag(beta) Kn Kn^T * E): P = diag(beta) dA * E, H = dA * A.
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        const int i = r * kLdC + s;
        if (pair_on(m, r, s, true)) {
            const float de = sY[i] * expf(m.gam[r] - m.gam[s]);
            sZ[i] = de * sX[i];              // d A / d beta_r part
            sY[i] = m.beta[r] * de;          // P
            sX[i] = m.beta[r] * de * sX[i];  // H
        } else {
            sZ[i] = sY[i] = sX[i] = 0.0f;
        }
    }
    add_row_col_sums(dG, sX, true);
    add_row_col_sums(dbeta, sZ, false);
    mm<false, false, kC, kD, kC, kLdC, kLdK, kLdK>(sAcc, sY, sK, 1.0f, 1.0f);
    mm<true, false, kC, kD, kC, kLdC, kLdK, kLdK>(sAcc, sY, sK, 1.0f, 1.0f);
    __syncthreads();
    store_tile(ws.dKn + tile * kTile, sAcc);
    // Gates: dg = reverse cumsum of dGamma; beta = sigmoid(b); g = -exp(A_log) softplus(a + dt).
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        float run = 0.0f;
        for (int j = kC - 1; j >= r; --j) run += dG[j];
        const int32_t t = c0 + r;
        float d_a = 0.0f, d_A = 0.0f;
        if (t < tokens) {
            const int64_t n = static_cast<int64_t>(t) * v_heads + h;
            const float dsp = m.ax[r] > kSoftplusThreshold ? 1.0f : sigmoidf(m.ax[r]);
            d_a = run * (-expf(A_log[h])) * dsp;
            da[n] = __float2bfloat16_rn(d_a);
            db[n] = __float2bfloat16_rn(dbeta[r] * m.beta[r] * (1.0f - m.beta[r]));
            d_A = run * m.g[r];
        }
        sX[r] = d_a;  // sX is free again
        sX[kC + r] = d_A;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum_da = 0.0f, sum_dA = 0.0f;
        for (int r = 0; r < kC; ++r) {
            sum_da += sX[r];
            sum_dA += sX[kC + r];
        }
        ws.pdt[tile] = sum_da;
        ws.pA[tile] = sum_dA;
    }
}

// dq, dk of key head kh at token t: sum the value heads' dQn, dKn in head order, then the L2
// norm backward dx = r (dy - (dy . y) y). One warp per (token, key head).
__global__ void __launch_bounds__(kThreads)
    gdn_qk_finalize_kernel(__nv_bfloat16* dq, __nv_bfloat16* dk, Ws ws, const __nv_bfloat16* q,
                           const __nv_bfloat16* k, int32_t tokens, int k_heads, int v_heads) {
    const int lane = threadIdx.x & 31;
    const int64_t item = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
    if (item >= static_cast<int64_t>(tokens) * k_heads) return;
    const int32_t t = static_cast<int32_t>(item / k_heads);
    const int kh = static_cast<int>(item % k_heads);
    const int ratio = v_heads / k_heads;
    const int c = t / kC, r = t % kC;
    for (int which = 0; which < 2; ++which) {
        const __nv_bfloat16* x = which == 0 ? q : k;
        const float* g = which == 0 ? ws.dQn : ws.dKn;
        float xv[kD / 32], gv[kD / 32];
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < kD / 32; ++i) {
            xv[i] = __bfloat162float(x[item * kD + lane + 32 * i]);
            ss += xv[i] * xv[i];
            gv[i] = 0.0f;
        }
        for (int j = 0; j < ratio; ++j) {
            const int64_t tile = static_cast<int64_t>(c) * v_heads + kh * ratio + j;
#pragma unroll
            for (int i = 0; i < kD / 32; ++i) gv[i] += g[tile * kTile + r * kD + lane + 32 * i];
        }
        const float rn = rsqrtf(cuda::warp_sum(ss) + kNormEps);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kD / 32; ++i) dot += gv[i] * xv[i] * rn;
        dot = cuda::warp_sum(dot);
        __nv_bfloat16* out = which == 0 ? dq : dk;
#pragma unroll
        for (int i = 0; i < kD / 32; ++i) {
            out[item * kD + lane + 32 * i] = __float2bfloat16_rn(rn * (gv[i] - dot * xv[i] * rn));
        }
    }
}

__global__ void gdn_gate_reduce_kernel(float* dA_log, float* ddt_bias, Ws ws, int chunks,
                                       int v_heads) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= v_heads) return;
    float sa = 0.0f, sd = 0.0f;
    for (int c = 0; c < chunks; ++c) {
        sa += ws.pA[static_cast<int64_t>(c) * v_heads + h];
        sd += ws.pdt[static_cast<int64_t>(c) * v_heads + h];
    }
    dA_log[h] += sa;
    ddt_bias[h] += sd;
}

template <typename F>
cudaError_t set_smem(F* kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(bytes));
}

cudaError_t launch_prep(const Ws& w, const __nv_bfloat16* q, const __nv_bfloat16* k,
                        const __nv_bfloat16* v, const __nv_bfloat16* a, const __nv_bfloat16* b,
                        const float* A_log, const float* dt_bias, const int32_t* cu,
                        int64_t num_docs, int64_t tokens, int64_t k_heads, int64_t v_heads,
                        float scale, cudaStream_t stream) {
    if (cudaError_t e = set_smem(gdn_chunk_prep_kernel, kPrepSmem); e != cudaSuccess) return e;
    if (cudaError_t e = cudaFuncSetAttribute(gdn_chunk_prep_kernel,
                                             cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared);
        e != cudaSuccess) {
        return e;
    }
    const dim3 grid(static_cast<unsigned>(num_chunks(tokens)), static_cast<unsigned>(v_heads));
    gdn_chunk_prep_kernel<<<grid, kThreads, kPrepSmem, stream>>>(
        w, q, k, v, a, b, A_log, dt_bias, cu, num_docs, static_cast<int32_t>(tokens),
        static_cast<int>(k_heads), static_cast<int>(v_heads), scale);
    return cudaGetLastError();
}

cudaError_t launch_recurrence(__nv_bfloat16* out, const Ws& w, int64_t tokens, int64_t v_heads,
                              bool save_states, cudaStream_t stream) {
    if (cudaError_t e = set_smem(gdn_recurrence_forward_kernel, kRecSmem); e != cudaSuccess) {
        return e;
    }
    const dim3 grid(static_cast<unsigned>(v_heads), kD / kBV);
    gdn_recurrence_forward_kernel<<<grid, kThreads, kRecSmem, stream>>>(
        out, w, static_cast<int32_t>(tokens), static_cast<int>(v_heads), save_states);
    return cudaGetLastError();
}

}  // namespace

// launchers

bool gated_delta_rule_supported(int64_t tokens, int64_t k_heads, int64_t v_heads, int64_t dk,
                                int64_t dv) {
    return tokens >= 0 && tokens < (int64_t{1} << 30) && k_heads > 0 && v_heads > 0 &&
           v_heads % k_heads == 0 && v_heads < 65536 && dk == kD && dv == kD;
}

size_t gated_delta_rule_forward_workspace_bytes(int64_t tokens, int64_t v_heads) {
    size_t bytes = 0;
    carve(nullptr, tokens, v_heads, false, &bytes);
    return bytes;
}

size_t gated_delta_rule_backward_workspace_bytes(int64_t tokens, int64_t v_heads) {
    size_t bytes = 0;
    carve(nullptr, tokens, v_heads, true, &bytes);
    return bytes;
}

cudaError_t gated_delta_rule_forward(__nv_bfloat16* out, const __nv_bfloat16* q,
                                     const __nv_bfloat16* k, const __nv_bfloat16* v,
                                     const __nv_bfloat16* a, const __nv_bfloat16* b,
                                     const float* A_log, const float* dt_bias,
                                     const int32_t* cu_seqlens, int64_t num_docs, int64_t tokens,
                                     int64_t k_heads, int64_t v_heads, float scale, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
    if (!gated_delta_rule_supported(tokens, k_heads, v_heads, kD, kD) || num_docs < 1) {
        return cudaErrorInvalidValue;
    }
    if (tokens == 0) return cudaSuccess;
    if (workspace_bytes < gated_delta_rule_forward_workspace_bytes(tokens, v_heads)) {
        return cudaErrorInvalidValue;
    }
    const Ws w = carve(workspace, tokens, v_heads, false, nullptr);
    if (cudaError_t e = launch_prep(w, q, k, v, a, b, A_log, dt_bias, cu_seqlens, num_docs, tokens,
                                    k_heads, v_heads, scale, stream);
        e != cudaSuccess) {
        return e;
    }
    return launch_recurrence(out, w, tokens, v_heads, false, stream);
}

cudaError_t gated_delta_rule_backward(
    __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, __nv_bfloat16* da, __nv_bfloat16* db,
    float* dA_log, float* ddt_bias, const __nv_bfloat16* dout, const __nv_bfloat16* q,
    const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* a, const __nv_bfloat16* b,
    const float* A_log, const float* dt_bias, const int32_t* cu_seqlens, int64_t num_docs,
    int64_t tokens, int64_t k_heads, int64_t v_heads, float scale, void* workspace,
    size_t workspace_bytes, cudaStream_t stream) {
    if (!gated_delta_rule_supported(tokens, k_heads, v_heads, kD, kD) || num_docs < 1) {
        return cudaErrorInvalidValue;
    }
    if (tokens == 0) return cudaSuccess;
    if (workspace_bytes < gated_delta_rule_backward_workspace_bytes(tokens, v_heads)) {
        return cudaErrorInvalidValue;
    }
    const Ws w = carve(workspace, tokens, v_heads, true, nullptr);
    const auto t32 = static_cast<int32_t>(tokens);
    const auto kh = static_cast<int>(k_heads), vh = static_cast<int>(v_heads);
    const auto chunks = static_cast<unsigned>(num_chunks(tokens));
    if (cudaError_t e = launch_prep(w, q, k, v, a, b, A_log, dt_bias, cu_seqlens, num_docs, tokens,
                                    k_heads, v_heads, scale, stream);
        e != cudaSuccess) {
        return e;
    }
    if (cudaError_t e = launch_recurrence(nullptr, w, tokens, v_heads, true, stream);
        e != cudaSuccess) {
        return e;
    }
    if (cudaError_t e = set_smem(gdn_recurrence_backward_kernel, kRecSmem); e != cudaSuccess) {
        return e;
    }
    gdn_recurrence_backward_kernel<<<dim3(vh, kD / kBV), kThreads, kRecSmem, stream>>>(w, dout, t32,
                                                                                       vh);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (cudaError_t e = set_smem(gdn_state_grads_kernel, kStateGradSmem); e != cudaSuccess) {
        return e;
    }
    gdn_state_grads_kernel<<<dim3(chunks, vh), kThreads, kStateGradSmem, stream>>>(w, dout, t32,
                                                                                   vh);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (cudaError_t e = set_smem(gdn_chunk_prep_backward_kernel, kPrepBwdSmem); e != cudaSuccess) {
        return e;
    }
    gdn_chunk_prep_backward_kernel<<<dim3(chunks, vh), kThreads, kPrepBwdSmem, stream>>>(
        w, dv, da, db, q, k, v, a, b, A_log, dt_bias, cu_seqlens, num_docs, t32, kh, vh, scale);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    const int64_t items = tokens * k_heads;
    const auto blocks = static_cast<unsigned>((items + kThreads / 32 - 1) / (kThreads / 32));
    gdn_qk_finalize_kernel<<<blocks, kThreads, 0, stream>>>(dq, dk, w, q, k, t32, kh, vh);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    gdn_gate_reduce_kernel<<<(vh + 127) / 128, 128, 0, stream>>>(dA_log, ddt_bias, w,
                                                                 static_cast<int>(chunks), vh);
    return cudaGetLastError();
}

}  // namespace deltatune
