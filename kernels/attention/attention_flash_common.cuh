// Shared by attention_flash.cu (forward) and attention_flash_backward.cu: the tile constants, the
// mma.sync m16n8k16 helpers, the geometry and the launch helpers of the handwritten varlen causal
// GQA flash attention (head_dim 256, Qwen3.5's sigmoid output gate fused). See attention_flash.cu
// for the design.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/varlen.cuh"

namespace deltatune {

namespace {

constexpr int kD = 256;             // head_dim
constexpr int kPad = 8;             // row padding (bf16) against bank conflicts
constexpr int kStride = kD + kPad;  // shared-memory row stride
constexpr int kThreads = 128;       // 4 warps
constexpr int kFwdRows = 64;        // query rows per forward block
constexpr int kFwdKeys = 32;        // keys per forward tile (two stages in flight)
constexpr int kBwdKeys = 32;        // keys per dk/dv block
constexpr int kBwdQueries = 32;     // queries per dk/dv tile
constexpr int kDqRows = 64;         // query rows per dq block
constexpr int kDqKeys = 16;         // keys per dq tile (two stages in flight)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using bf16 = __nv_bfloat16;

// ---- mma.sync helpers (fragment layouts of PTX's m16n8k16, g = lane / 4, c = lane % 4) ----

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
    const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
    const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Lane l addresses row l % 8 of 8x8 matrix l / 8 in every ldmatrix below. Rows are 16-byte
// aligned (kStride * 2 bytes = 33 * 16) and consecutive rows start 4 banks apart: no conflicts.

// A (16 x 16) from a row-major tile: rows r0 .. r0 + 15, columns k0 .. k0 + 15.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* s, int r0, int k0) {
    const int lane = threadIdx.x & 31;
    const int m = lane >> 3;
    ldmatrix_x4(a, s + (r0 + (lane & 7) + 8 * (m & 1)) * kStride + k0 + 8 * (m >> 1));
}

// Two B fragments (16 x 8 each, n tiles n0 and n0 + 8) with B[k][n] = M[n0 + n][k0 + k] for a
// row-major M: the "transposed" operand, e.g. K in Q K^T.
__device__ __forceinline__ void load_b_nk2(uint32_t (&lo)[2], uint32_t (&hi)[2], const bf16* s,
                                           int n0, int k0) {
    const int lane = threadIdx.x & 31;
    const int m = lane >> 3;
    uint32_t r[4];
    ldmatrix_x4(r, s + (n0 + (lane & 7) + 8 * (m >> 1)) * kStride + k0 + 8 * (m & 1));
    lo[0] = r[0];
    lo[1] = r[1];
    hi[0] = r[2];
    hi[1] = r[3];
}

// Two B fragments (n tiles n0 and n0 + 8) with B[k][n] = M[k0 + k][n0 + n] for a row-major M,
// e.g. V in P V: ldmatrix's transposing form.
__device__ __forceinline__ void load_b_kn2(uint32_t (&lo)[2], uint32_t (&hi)[2], const bf16* s,
                                           int k0, int n0) {
    const int lane = threadIdx.x & 31;
    const int m = lane >> 3;
    uint32_t r[4];
    ldmatrix_x4_trans(r, s + (k0 + (lane & 7) + 8 * (m & 1)) * kStride + n0 + 8 * (m >> 1));
    lo[0] = r[0];
    lo[1] = r[1];
    hi[0] = r[2];
    hi[1] = r[3];
}

// The A operand (16 x 16) made from two accumulator tiles (16 x 8 each) of the previous product:
// FlashAttention-2's register reuse of P (or dS) without a trip through shared memory.
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&lo)[4],
                                         const float (&hi)[4]) {
    a[0] = pack_bf16(lo[0], lo[1]);
    a[1] = pack_bf16(lo[2], lo[3]);
    a[2] = pack_bf16(hi[0], hi[1]);
    a[3] = pack_bf16(hi[2], hi[3]);
}

// x = Ax[r0 .. r0 + 16) Bx^T and y = Ay[r0 .. r0 + 16) By^T over head_dim, against the first
// 8 * NT rows of Bx and By: the backward's two score-like products (S and dP, or transposes).
template <int NT>
__device__ __forceinline__ void paired_products(float (&x)[NT][4], float (&y)[NT][4],
                                                const bf16* ax, const bf16* ay, int r0,
                                                const bf16* bx, const bf16* by) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) x[n][e] = y[n][e] = 0.0f;
    }
#pragma unroll 4
    for (int kk = 0; kk < kD; kk += 16) {
        uint32_t a_x[4], a_y[4];
        load_a(a_x, ax, r0, kk);
        load_a(a_y, ay, r0, kk);
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            uint32_t b0[2], b1[2];
            load_b_nk2(b0, b1, bx, n * 8, kk);
            mma16816(x[n], a_x, b0);
            mma16816(x[n + 1], a_x, b1);
            load_b_nk2(b0, b1, by, n * 8, kk);
            mma16816(y[n], a_y, b0);
            mma16816(y[n + 1], a_y, b1);
        }
    }
}

// cp.async (16 bytes, L2 only), zero-filling when !valid (then nothing is read from `src`).
__device__ __forceinline__ void cp_async16(bf16* dst, const bf16* src, bool valid) {
    const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}

using cuda::cp_async_commit;

// Copies `rows` rows of head_dim bf16 (global row r at src + r * row_stride) into a padded
// shared tile, zero-filling rows at or past `end`, asynchronously: the caller commits, waits
// and synchronises before reading.
__device__ __forceinline__ void load_tile_async(bf16* dst, const bf16* src, int64_t row_stride,
                                                int64_t row0, int rows, int64_t end) {
    constexpr int kVecs = kD / 8;
    for (int i = threadIdx.x; i < rows * kVecs; i += blockDim.x) {
        const int r = i / kVecs;
        const int v = i % kVecs;
        const int64_t gr = row0 + r;
        const bool valid = gr < end;
        cp_async16(dst + r * kStride + v * 8, valid ? src + gr * row_stride + v * 8 : src, valid);
    }
}

// Key/value tile t (ROWS rows from kv_begin + t * ROWS, zero past kv_end) into stage t % 2 of
// `stages` (per stage: K tile, then V tile).
template <int ROWS>
__device__ __forceinline__ void prefetch_kv_tile(bf16* stages, int64_t t, const bf16* k,
                                                 const bf16* v, int64_t kv_stride, int64_t kv_begin,
                                                 int64_t kv_end) {
    bf16* kst = stages + (t & 1) * 2 * ROWS * kStride;
    const int64_t j0 = kv_begin + t * ROWS;
    load_tile_async(kst, k, kv_stride, j0, ROWS, kv_end);
    load_tile_async(kst + ROWS * kStride, v, kv_stride, j0, ROWS, kv_end);
}

struct Geom {
    int64_t tokens;
    int num_docs, q_heads, kv_heads;
    int64_t gate_token_stride, gate_head_stride;
    float scale_log2;  // scale * log2(e)
};

// The block of ROWS query rows of one head that the forward and the dq kernel each run (grid: x
// the row block, y the query head): its kv head, strides, and the key range it reads in tiles of
// KEYS, from its first row's document start to its last row. Bound by the kernels as
// `const auto& [h, kvh, q0, q_stride, kv_stride, kv_begin, kv_end, n_tiles] = rows;`.
template <int ROWS, int KEYS>
struct QueryRows {
    int h, kvh;
    int64_t q0, q_stride, kv_stride, kv_begin, kv_end, n_tiles;

    __device__ __forceinline__ QueryRows(const int32_t* cu, const Geom& geo)
        : h(static_cast<int>(blockIdx.y)),
          kvh(h / (geo.q_heads / geo.kv_heads)),
          q0(static_cast<int64_t>(blockIdx.x) * ROWS),
          q_stride(static_cast<int64_t>(geo.q_heads) * kD),
          kv_stride(static_cast<int64_t>(geo.kv_heads) * kD),
          kv_begin(cu[cuda::doc_of(cu, geo.num_docs, q0)]),
          kv_end(min(geo.tokens, q0 + ROWS)),
          n_tiles((kv_end - kv_begin + KEYS - 1) / KEYS) {}

    // Key/value tile t (zero past kv_end) into stage t % 2 of `stages`.
    __device__ __forceinline__ void prefetch(bf16* stages, int64_t t, const bf16* k,
                                             const bf16* v) const {
        prefetch_kv_tile<KEYS>(stages, t, k + kvh * kD, v + kvh * kD, kv_stride, kv_begin, kv_end);
    }
};

// ---------------------------------------- launch helpers -----------------------------------

inline Geom geom_of(const GatedAttentionArgs& a) {
    return Geom{a.tokens,
                static_cast<int>(a.num_docs),
                static_cast<int>(a.q_heads),
                static_cast<int>(a.kv_heads),
                a.gate_token_stride,
                a.gate_head_stride,
                a.scale * kLog2e};
}

constexpr size_t kFwdSmem = sizeof(bf16) * kStride * (kFwdRows + 4 * kFwdKeys);
constexpr size_t kDkdvSmem = sizeof(bf16) * kStride * (2 * kBwdKeys + 4 * kBwdQueries) +
                             2 * kBwdQueries * (sizeof(int64_t) + 2 * sizeof(float));
constexpr size_t kDqSmem = sizeof(bf16) * kStride * (2 * kDqRows + 4 * kDqKeys);
static_assert(std::max({kFwdSmem, kDkdvSmem, kDqSmem}) == kAttentionFlashSmemBytes,
              "attention.h tells the kernel choice this figure");

using cuda::align256;

template <typename Kernel>
inline cudaError_t set_smem(Kernel kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(bytes));
}

}  // namespace

}  // namespace deltatune
