// Varlen causal GQA flash attention for head_dim 256 with Qwen3.5's sigmoid output gate fused,
// forward and backward, on mma.sync m16n8k16 (bf16 in, fp32 accumulate).
//
// Tiles may straddle documents: every query row finds its own document start (binary search of
// cu_seqlens), and a key j is visible to row i iff doc_start(i) <= j <= i. So no host-side
// document list or max length is needed.
//   forward:  block = 4 warps = 64 query rows of one head; key tiles of 64; online softmax in
//             registers (FA2 layout: the score accumulators are reused as the A operand of P V).
//   backward: a pre-pass (attention_gate_backward) forms d_o = dy * sigmoid(gate), dgate and
//             delta = rowsum(d_o * o);
//             dk/dv: block = 32 keys of one kv head, looping over the group's query heads and the
//             query tiles that can see them (warps split keys x head_dim halves);
//             dq: block = 64 query rows, looping over key tiles. No atomics: deterministic.
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_gate.h"
#include "kernels/common/cuda_utils.cuh"

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

// Index d of the document holding token t: cu[d] <= t < cu[d + 1].
__device__ __forceinline__ int doc_of(const int32_t* cu, int num_docs, int64_t t) {
    int lo = 0;
    int hi = num_docs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (cu[mid] <= t) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

struct Geom {
    int64_t tokens;
    int num_docs, q_heads, kv_heads;
    int64_t gate_token_stride, gate_head_stride;
    float scale_log2;  // scale * log2(e)
};

// ---------------------------------------- kernels ------------------------------------------

__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(bf16* y, bf16* o, float* lse, const bf16* q, const bf16* k,
                             const bf16* v, const bf16* gate, const int32_t* cu, Geom geo) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* qs = reinterpret_cast<bf16*>(smem_raw);
    bf16* kv_stages = qs + kFwdRows * kStride;  // stage s: K at 2s, V at 2s + 1 (kFwdKeys rows)
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int c = lane & 3;
    const int h = blockIdx.y;
    const int kvh = h / (geo.q_heads / geo.kv_heads);
    const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kFwdRows;
    const int64_t q_stride = static_cast<int64_t>(geo.q_heads) * kD;
    const int64_t kv_stride = static_cast<int64_t>(geo.kv_heads) * kD;

    const int64_t kv_begin = cu[doc_of(cu, geo.num_docs, q0)];
    const int64_t kv_end = min(geo.tokens, q0 + kFwdRows);
    const int64_t n_tiles = (kv_end - kv_begin + kFwdKeys - 1) / kFwdKeys;
    auto prefetch = [&](int64_t t) {
        prefetch_kv_tile<kFwdKeys>(kv_stages, t, k + kvh * kD, v + kvh * kD, kv_stride, kv_begin,
                                   kv_end);
    };
    load_tile_async(qs, q + h * kD, q_stride, q0, kFwdRows, geo.tokens);
    prefetch(0);
    cp_async_commit();
    // This thread's two rows and their document starts.
    int64_t row[2];
    int64_t start[2];
    for (int i = 0; i < 2; ++i) {
        row[i] = q0 + warp * 16 + g + 8 * i;
        start[i] = row[i] < geo.tokens ? cu[doc_of(cu, geo.num_docs, row[i])] : INT64_MAX;
    }
    // A tile needs no mask for this warp when all 16 rows exist, it starts at or after the last
    // row's document start (the largest), and it ends at or before the first row.
    const int64_t warp_first = q0 + warp * 16;
    const bool warp_rows_valid = warp_first + 15 < geo.tokens;
    const int64_t warp_last_start = __shfl_sync(0xffffffffu, start[1], 31);

    float acc[kD / 8][4];
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY};
    float l[2] = {0.0f, 0.0f};

    for (int64_t t = 0; t < n_tiles; ++t) {
        // Stage (t + 1) % 2 was last read in iteration t - 1, which ended with a barrier.
        if (t + 1 < n_tiles) prefetch(t + 1);
        cp_async_commit();         // possibly empty: keeps "all but the newest group" = tile t
        cuda::cp_async_wait<1>();  // at most one group in flight
        __syncthreads();
        const int64_t j0 = kv_begin + t * kFwdKeys;
        const bf16* ks = kv_stages + (t & 1) * 2 * kFwdKeys * kStride;
        const bf16* vs = ks + kFwdKeys * kStride;
        const bool unmasked =
            warp_rows_valid && j0 >= warp_last_start && j0 + kFwdKeys - 1 <= warp_first;
        float s[kFwdKeys / 8][4];
#pragma unroll
        for (int n = 0; n < kFwdKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll 4
        for (int kk = 0; kk < kD; kk += 16) {
            uint32_t a[4];
            load_a(a, qs, warp * 16, kk);
#pragma unroll
            for (int n = 0; n < kFwdKeys / 8; n += 2) {
                uint32_t b0[2], b1[2];
                load_b_nk2(b0, b1, ks, n * 8, kk);
                mma16816(s[n], a, b0);
                mma16816(s[n + 1], a, b1);
            }
        }
        // Mask, scale to log2 units, online softmax per row (rows g and g + 8 of the warp).
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < kFwdKeys / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = e >> 1;
                const int64_t key = j0 + n * 8 + 2 * c + (e & 1);
                const bool ok = unmasked || (key >= start[i] && key <= row[i]);
                s[n][e] = ok ? s[n][e] * geo.scale_log2 : -INFINITY;
                tile_max[i] = fmaxf(tile_max[i], s[n][e]);
            }
        }
        float alpha[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
            tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
            const float m_new = fmaxf(m[i], tile_max[i]);
            alpha[i] = m_new == -INFINITY ? 1.0f : exp2f(m[i] - m_new);
            m[i] = m_new;
        }
        float rowsum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < kFwdKeys / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = e >> 1;
                s[n][e] = m[i] == -INFINITY ? 0.0f : exp2f(s[n][e] - m[i]);
                rowsum[i] += s[n][e];
            }
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) l[i] = l[i] * alpha[i] + rowsum[i];
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
            acc[n][0] *= alpha[0];
            acc[n][1] *= alpha[0];
            acc[n][2] *= alpha[1];
            acc[n][3] *= alpha[1];
        }
        // O += P V, P straight from the score registers.
#pragma unroll
        for (int kk = 0; kk < kFwdKeys / 16; ++kk) {
            uint32_t a[4];
            acc_to_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < kD / 8; n += 2) {
                uint32_t b0[2], b1[2];
                load_b_kn2(b0, b1, vs, kk * 16, n * 8);
                mma16816(acc[n], a, b0);
                mma16816(acc[n + 1], a, b1);
            }
        }
        __syncthreads();  // every warp is done with stage t % 2 before it is refilled
    }
    // Normalise, write o, y = o * sigmoid(gate) (from the rounded o, as the bf16 model does),
    // and the natural-log lse.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (row[i] >= geo.tokens) continue;
        const float inv = 1.0f / l[i];
        bf16* orow = o + row[i] * q_stride + h * kD;
        bf16* yrow = y + row[i] * q_stride + h * kD;
        const bf16* grow = gate + row[i] * geo.gate_token_stride + h * geo.gate_head_stride;
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
            const int col = n * 8 + 2 * c;
            const __nv_bfloat162 ov =
                __floats2bfloat162_rn(acc[n][2 * i] * inv, acc[n][2 * i + 1] * inv);
            *reinterpret_cast<__nv_bfloat162*>(orow + col) = ov;
            const float2 of = __bfloat1622float2(ov);
            const float g0 = __bfloat162float(grow[col]);
            const float g1 = __bfloat162float(grow[col + 1]);
            *reinterpret_cast<__nv_bfloat162*>(yrow + col) =
                __floats2bfloat162_rn(of.x / (1.0f + expf(-g0)), of.y / (1.0f + expf(-g1)));
        }
        if (c == 0) lse[row[i] * geo.q_heads + h] = (m[i] + log2f(l[i])) * kLn2;
    }
}

// dk, dv for 32 keys of one kv head. Warp w: keys 16 * (w % 2) .. + 16, head_dim half w / 2.
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(bf16* dk, bf16* dv, const bf16* q, const bf16* k, const bf16* v,
                                   const bf16* d_o, const float* lse, const float* delta,
                                   const int32_t* cu, Geom geo) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* ks = reinterpret_cast<bf16*>(smem_raw);
    bf16* vs = ks + kBwdKeys * kStride;
    bf16* q_stages = vs + kBwdKeys * kStride;  // stage s: Q at 2s, dO at 2s + 1 (kBwdQueries rows)
    // Per stage and query: document start, lse in log2 units, delta.
    int64_t* qstart_stages = reinterpret_cast<int64_t*>(q_stages + 4 * kBwdQueries * kStride);
    float* lse2_stages = reinterpret_cast<float*>(qstart_stages + 2 * kBwdQueries);
    float* delta_stages = lse2_stages + 2 * kBwdQueries;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int c = lane & 3;
    const int kb = (warp & 1) * 16;       // this warp's first key within the tile
    const int dbase = (warp >> 1) * 128;  // this warp's head_dim half
    const int kvh = blockIdx.y;
    const int group = geo.q_heads / geo.kv_heads;
    const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kBwdKeys;
    const int64_t kv_stride = static_cast<int64_t>(geo.kv_heads) * kD;
    const int64_t q_stride = static_cast<int64_t>(geo.q_heads) * kD;
    const int64_t last_key = min(geo.tokens, k0 + kBwdKeys) - 1;
    const int64_t q_end = cu[doc_of(cu, geo.num_docs, last_key) + 1];

    // The work is (query head of the group) x (query tile from k0 to q_end), flattened so the
    // next tile's copies overlap this tile's products across head boundaries too.
    const int64_t q_tiles = (q_end - k0 + kBwdQueries - 1) / kBwdQueries;
    const int64_t n_tiles = q_tiles * group;
    auto prefetch = [&](int64_t t) {  // tile t into stage t % 2
        const int hq = kvh * group + static_cast<int>(t / q_tiles);
        const int64_t i0 = k0 + (t % q_tiles) * kBwdQueries;
        const int st = static_cast<int>(t & 1);
        bf16* qst = q_stages + st * 2 * kBwdQueries * kStride;
        load_tile_async(qst, q + hq * kD, q_stride, i0, kBwdQueries, q_end);
        load_tile_async(qst + kBwdQueries * kStride, d_o + hq * kD, q_stride, i0, kBwdQueries,
                        q_end);
        for (int i = threadIdx.x; i < kBwdQueries; i += blockDim.x) {
            const int64_t qi = i0 + i;
            const bool in = qi < q_end;
            lse2_stages[st * kBwdQueries + i] = in ? lse[qi * geo.q_heads + hq] * kLog2e : 0.0f;
            delta_stages[st * kBwdQueries + i] = in ? delta[qi * geo.q_heads + hq] : 0.0f;
            qstart_stages[st * kBwdQueries + i] = in ? cu[doc_of(cu, geo.num_docs, qi)] : INT64_MAX;
        }
    };
    load_tile_async(ks, k + kvh * kD, kv_stride, k0, kBwdKeys, geo.tokens);
    load_tile_async(vs, v + kvh * kD, kv_stride, k0, kBwdKeys, geo.tokens);
    prefetch(0);
    cp_async_commit();

    float dk_acc[16][4];
    float dv_acc[16][4];
#pragma unroll
    for (int n = 0; n < 16; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;
    }
    int64_t key[2];
    for (int i = 0; i < 2; ++i) key[i] = k0 + kb + g + 8 * i;

    for (int64_t t = 0; t < n_tiles; ++t) {
        if (t + 1 < n_tiles) prefetch(t + 1);
        cp_async_commit();
        cuda::cp_async_wait<1>();  // at most one group in flight
        __syncthreads();
        const int st_idx = static_cast<int>(t & 1);
        const int64_t i0 = k0 + (t % q_tiles) * kBwdQueries;
        const bf16* qs = q_stages + st_idx * 2 * kBwdQueries * kStride;
        const bf16* dos = qs + kBwdQueries * kStride;
        const int64_t* qstart_s = qstart_stages + st_idx * kBwdQueries;
        const float* lse2_s = lse2_stages + st_idx * kBwdQueries;
        const float* delta_s = delta_stages + st_idx * kBwdQueries;
        // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x 32 queries.
        float st[kBwdQueries / 8][4];
        float dpt[kBwdQueries / 8][4];
        paired_products(st, dpt, ks, vs, kb, qs, dos);
        // P^T and dS^T in place (st -> P^T, dpt -> dS^T).
#pragma unroll
        for (int n = 0; n < kBwdQueries / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int qi = n * 8 + 2 * c + (e & 1);
                const int64_t kj = key[e >> 1];
                const bool ok = kj >= qstart_s[qi] && kj <= i0 + qi;
                const float p = ok ? exp2f(st[n][e] * geo.scale_log2 - lse2_s[qi]) : 0.0f;
                st[n][e] = p;
                dpt[n][e] = p * (dpt[n][e] - delta_s[qi]);
            }
        }
        // dV += P^T dO, dK += dS^T Q over this warp's head_dim half.
#pragma unroll
        for (int kk = 0; kk < kBwdQueries / 16; ++kk) {
            uint32_t ap[4], ads[4];
            acc_to_a(ap, st[2 * kk], st[2 * kk + 1]);
            acc_to_a(ads, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < 16; n += 2) {
                uint32_t b0[2], b1[2];
                load_b_kn2(b0, b1, dos, kk * 16, dbase + n * 8);
                mma16816(dv_acc[n], ap, b0);
                mma16816(dv_acc[n + 1], ap, b1);
                load_b_kn2(b0, b1, qs, kk * 16, dbase + n * 8);
                mma16816(dk_acc[n], ads, b0);
                mma16816(dk_acc[n + 1], ads, b1);
            }
        }
        __syncthreads();  // stage t % 2 fully read before it is refilled
    }
    const float scale = geo.scale_log2 / kLog2e;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (key[i] >= geo.tokens) continue;
        bf16* dkrow = dk + key[i] * kv_stride + kvh * kD + dbase;
        bf16* dvrow = dv + key[i] * kv_stride + kvh * kD + dbase;
#pragma unroll
        for (int n = 0; n < 16; ++n) {
            const int col = n * 8 + 2 * c;
            *reinterpret_cast<__nv_bfloat162*>(dkrow + col) =
                __floats2bfloat162_rn(dk_acc[n][2 * i] * scale, dk_acc[n][2 * i + 1] * scale);
            *reinterpret_cast<__nv_bfloat162*>(dvrow + col) =
                __floats2bfloat162_rn(dv_acc[n][2 * i], dv_acc[n][2 * i + 1]);
        }
    }
}

// dq for 64 query rows of one head, looping over the key tiles they can see.
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(bf16* dq, const bf16* q, const bf16* k, const bf16* v,
                                 const bf16* d_o, const float* lse, const float* delta,
                                 const int32_t* cu, Geom geo) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* qs = reinterpret_cast<bf16*>(smem_raw);
    bf16* dos = qs + kDqRows * kStride;
    bf16* kv_stages = dos + kDqRows * kStride;  // stage s: K at 2s, V at 2s + 1 (kDqKeys rows)
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int c = lane & 3;
    const int h = blockIdx.y;
    const int kvh = h / (geo.q_heads / geo.kv_heads);
    const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kDqRows;
    const int64_t q_stride = static_cast<int64_t>(geo.q_heads) * kD;
    const int64_t kv_stride = static_cast<int64_t>(geo.kv_heads) * kD;
    const int64_t kv_begin = cu[doc_of(cu, geo.num_docs, q0)];
    const int64_t kv_end = min(geo.tokens, q0 + kDqRows);
    const int64_t n_tiles = (kv_end - kv_begin + kDqKeys - 1) / kDqKeys;
    auto prefetch = [&](int64_t t) {
        prefetch_kv_tile<kDqKeys>(kv_stages, t, k + kvh * kD, v + kvh * kD, kv_stride, kv_begin,
                                  kv_end);
    };
    load_tile_async(qs, q + h * kD, q_stride, q0, kDqRows, geo.tokens);
    load_tile_async(dos, d_o + h * kD, q_stride, q0, kDqRows, geo.tokens);
    prefetch(0);
    cp_async_commit();
    int64_t row[2], start[2];
    float lse2[2], dlt[2];
    for (int i = 0; i < 2; ++i) {
        row[i] = q0 + warp * 16 + g + 8 * i;
        const bool in = row[i] < geo.tokens;
        start[i] = in ? cu[doc_of(cu, geo.num_docs, row[i])] : INT64_MAX;
        lse2[i] = in ? lse[row[i] * geo.q_heads + h] * kLog2e : 0.0f;
        dlt[i] = in ? delta[row[i] * geo.q_heads + h] : 0.0f;
    }
    float acc[kD / 8][4];
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int64_t t = 0; t < n_tiles; ++t) {
        if (t + 1 < n_tiles) prefetch(t + 1);
        cp_async_commit();
        cuda::cp_async_wait<1>();  // at most one group in flight
        __syncthreads();
        const int64_t j0 = kv_begin + t * kDqKeys;
        const bf16* ks = kv_stages + (t & 1) * 2 * kDqKeys * kStride;
        const bf16* vs = ks + kDqKeys * kStride;
        float s[kDqKeys / 8][4];
        float dp[kDqKeys / 8][4];
        paired_products(s, dp, qs, dos, warp * 16, ks, vs);
#pragma unroll
        for (int n = 0; n < kDqKeys / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = e >> 1;
                const int64_t kj = j0 + n * 8 + 2 * c + (e & 1);
                const bool ok = kj >= start[i] && kj <= row[i];
                const float p = ok ? exp2f(s[n][e] * geo.scale_log2 - lse2[i]) : 0.0f;
                s[n][e] = p * (dp[n][e] - dlt[i]);  // dS
            }
        }
#pragma unroll
        for (int kk = 0; kk < kDqKeys / 16; ++kk) {
            uint32_t a[4];
            acc_to_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < kD / 8; n += 2) {
                uint32_t b0[2], b1[2];
                load_b_kn2(b0, b1, ks, kk * 16, n * 8);
                mma16816(acc[n], a, b0);
                mma16816(acc[n + 1], a, b1);
            }
        }
        __syncthreads();  // stage t % 2 fully read before it is refilled
    }
    const float scale = geo.scale_log2 / kLog2e;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (row[i] >= geo.tokens) continue;
        bf16* dqrow = dq + row[i] * q_stride + h * kD;
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
            *reinterpret_cast<__nv_bfloat162*>(dqrow + n * 8 + 2 * c) =
                __floats2bfloat162_rn(acc[n][2 * i] * scale, acc[n][2 * i + 1] * scale);
        }
    }
}

// ---------------------------------------- launchers ----------------------------------------

Geom geom_of(const GatedAttentionArgs& a) {
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

size_t align256(size_t n) {
    return (n + 255) / 256 * 256;
}

template <typename Kernel>
cudaError_t set_smem(Kernel kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(bytes));
}

}  // namespace

bool gated_attention_supported(const GatedAttentionArgs& a) {
    return a.head_dim == kD && a.q_heads > 0 && a.kv_heads > 0 && a.q_heads % a.kv_heads == 0 &&
           a.q_heads <= 65535 && a.num_docs > 0 && a.tokens >= 0 && a.q && a.k && a.v && a.gate &&
           a.cu_seqlens && a.gate_token_stride % 8 == 0 && a.gate_head_stride % 8 == 0 &&
           cuda::aligned16(a.q) && cuda::aligned16(a.k) && cuda::aligned16(a.v) &&
           cuda::aligned16(a.gate);
}

cudaError_t gated_attention_forward(bf16* y, bf16* o, float* lse, const GatedAttentionArgs& a,
                                    cudaStream_t stream) {
    if (!gated_attention_supported(a)) return cudaErrorInvalidValue;
    if (a.tokens == 0) return cudaSuccess;
    if (cudaError_t e = set_smem(attention_forward_kernel, kFwdSmem); e != cudaSuccess) return e;
    const dim3 grid(static_cast<unsigned>((a.tokens + kFwdRows - 1) / kFwdRows),
                    static_cast<unsigned>(a.q_heads));
    attention_forward_kernel<<<grid, kThreads, kFwdSmem, stream>>>(y, o, lse, a.q, a.k, a.v, a.gate,
                                                                   a.cu_seqlens, geom_of(a));
    return cudaGetLastError();
}

size_t gated_attention_backward_workspace_bytes(const GatedAttentionArgs& a) {
    const size_t rows = static_cast<size_t>(a.tokens * a.q_heads);
    return align256(sizeof(bf16) * rows * kD) + align256(sizeof(float) * rows);
}

cudaError_t gated_attention_backward(bf16* dq, bf16* dk, bf16* dv, bf16* dgate, const bf16* dy,
                                     const bf16* o, const float* lse, const GatedAttentionArgs& a,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (!gated_attention_supported(a)) return cudaErrorInvalidValue;
    if (a.tokens == 0) return cudaSuccess;
    if (workspace_bytes < gated_attention_backward_workspace_bytes(a)) {
        return cudaErrorInvalidValue;
    }
    // dy, o and the workspace are read and written 16 bytes at a time.
    if (!cuda::aligned16(dy) || !cuda::aligned16(o) || !cuda::aligned16(workspace)) {
        return cudaErrorInvalidValue;
    }
    const Geom geo = geom_of(a);
    const size_t rows = static_cast<size_t>(a.tokens * a.q_heads);
    auto* d_o = static_cast<bf16*>(workspace);
    auto* delta = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                           align256(sizeof(bf16) * rows * kD));
    if (cudaError_t e = attention_gate_backward(d_o, delta, dgate, dy, o,
                                                {a.gate, a.gate_token_stride, a.gate_head_stride},
                                                a.tokens, a.q_heads, stream);
        e != cudaSuccess) {
        return e;
    }
    if (cudaError_t e = set_smem(attention_backward_dkdv_kernel, kDkdvSmem); e != cudaSuccess) {
        return e;
    }
    const dim3 grid_kv(static_cast<unsigned>((a.tokens + kBwdKeys - 1) / kBwdKeys),
                       static_cast<unsigned>(a.kv_heads));
    attention_backward_dkdv_kernel<<<grid_kv, kThreads, kDkdvSmem, stream>>>(
        dk, dv, a.q, a.k, a.v, d_o, lse, delta, a.cu_seqlens, geo);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (cudaError_t e = set_smem(attention_backward_dq_kernel, kDqSmem); e != cudaSuccess) return e;
    const dim3 grid_q(static_cast<unsigned>((a.tokens + kDqRows - 1) / kDqRows),
                      static_cast<unsigned>(a.q_heads));
    attention_backward_dq_kernel<<<grid_q, kThreads, kDqSmem, stream>>>(dq, a.q, a.k, a.v, d_o, lse,
                                                                        delta, a.cu_seqlens, geo);
    return cudaGetLastError();
}

}  // namespace deltatune
