// The tile arithmetic of the wgmma attention kernels: tile constants, the forward's two products
// of a key tile as wgmma, the masked online softmax of one tile of scores, the consumer
// warpgroups' turns and the fast sigmoid of the gate (attention_wgmma.cu); the backward's
// staged fp32 reductions (attention_wgmma_backward.cu); the work lists of both.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "kernels/attention/attention.h"
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/hopper.cuh"

namespace deltatune::wgmma_attention {

using namespace hopper;

constexpr int kD = 256;                   // head_dim
constexpr int kBm = 128;                  // query rows per block (2 consumer warpgroups)
constexpr int kBn = 64;                   // keys per tile
constexpr int kChunkCols = 64;            // columns per 128-byte swizzled chunk
constexpr int kChunks = kD / kChunkCols;  // 4
constexpr int kQBytes = kBm * kD * 2;     // 64 KiB
constexpr int kKvBytes = kBn * kD * 2;  // 32 KiB: 64 rows of head_dim (K, V; the backward's Q, d_o)
constexpr int kTileChunkBytes = kBn * 128;   // 8 KiB: one 64-column chunk of such a tile
constexpr int kDsTileBytes = kBn * kBn * 2;  // 8 KiB: a 64 x 64 bf16 tile (P^T, dS^T)
constexpr int kStages = 2;
// Every wgmma attention kernel: a producer warpgroup and two consumer warpgroups.
constexpr int kThreads = 384;
constexpr int kConsumerWarps = 8;
// Registers per thread after setmaxnreg: the producer warpgroup gives its back, the consumers
// take them. setmaxnreg.inc waits until the block's own pool (the launch bound's 168 per thread
// for one block of kThreads) can serve it, so the sum may not pass it (32 + 2 x 240 hung).
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 2 * 128 * kConsumerRegs <= kThreads * 168,
              "setmaxnreg would wait forever for registers the block does not have");
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// The two consumer warpgroups take turns issuing their matrix products (FlashAttention-3's
// ping-pong): warpgroup cw waits on barrier 2 + cw for its turn and, once its wgmmas are issued,
// hands the turn to the other, so that one's softmax runs while the other's products do.
__device__ __forceinline__ void turn_wait(int cw) {
    named_barrier(2 + cw, 256);
}
__device__ __forceinline__ void turn_pass(int cw) {
    asm volatile("bar.arrive %0, 256;\n" ::"r"(3 - cw) : "memory");
}

// 2^x on the multi-function unit, results below 2^-126 flushed to 0 (probabilities that small
// vanish against the row's maximum, 2^0, in any sum): exp2f adds a rescaling for denormal
// results around each of these, which the softmax runs 4096 times per tile and warpgroup.
__device__ __forceinline__ float ex2_ftz(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

// sigmoid of two values, 1 / (1 + 2^(-x log2 e)) each, on the approximate exp2 and reciprocal
// units, three operations of the multi-function unit for the pair rather than four: with
// a = 1 + 2^(-x0 log2 e) and b likewise, 1 / (a b) times b and times a (a few ulp of fp32, far
// below the bf16 rounding of y). The epilogue is bound by that unit: packed forward 411.8-412.9
// TFLOP/s against 405.4-407.8 with one reciprocal per value (alternating runs). Each exponent is
// capped at 63 so that a b stays below 2^127 (sigmoid below 2^-63, past g = -43.7, comes out as
// 2^-63 times the other's factor: about 1e-19, not 0); the cap lets NaN through (min.NaN), so a
// NaN gate gives NaN in y, and in its pair's other value. 2^(-x log2 e) flushed to 0 below
// 2^-126 gives exactly 1 for very positive x. The precise expf and division had compiled to
// slow-path calls that made the epilogue's code too large for the instruction cache; __expf's
// denormal rescaling cost 3 more instructions per value (ncu source counters; docs/performance.md
// "Measured choices").
__device__ __forceinline__ float exp2_capped(float x) {
    float capped;
    asm("min.NaN.f32 %0, %1, 63.0;\n" : "=f"(capped) : "f"(x));
    return ex2_ftz(capped);
}
__device__ __forceinline__ float2 sigmoid_pair(float x0, float x1) {
    const float a = 1.0f + exp2_capped(x0 * -kLog2e);
    const float b = 1.0f + exp2_capped(x1 * -kLog2e);
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(a * b));
    return make_float2(r * b, r * a);
}

// S (64 x 64) = Q K^T for this warpgroup's 64 rows: 16 wgmma over head_dim, both from shared
// memory.
__device__ __forceinline__ void issue_scores(float (&sc)[32], uint32_t q_base, uint32_t k_base) {
    const uint64_t q_desc = sw128_desc(q_base, 16, 1024), k_desc = sw128_desc(k_base, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
        const uint32_t chunk = kk / 4, within = (kk % 4) * 32;
        wgmma_m64n64k16_ss(sc, desc_at(q_desc, chunk * kBm * 128 + within),
                           desc_at(k_desc, chunk * kBn * 128 + within), kk > 0);
    }
}

// O (64 x 256) += P V, P (64 x 64) from registers.
__device__ __forceinline__ void issue_pv(float (&acc)[128], const uint32_t (&pa)[16],
                                         uint32_t v_base) {
    const uint64_t v_desc = sw128_desc(v_base, kBn * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < kBn / 16; ++kk) {
        const uint32_t a[4] = {pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]};
        wgmma_m64n256k16_rs_tb(acc, a, desc_at(v_desc, kk * 16 * 128));
    }
}

// Online softmax of one tile of scores (this thread's rows lo = g and hi = g + 8 of its warp's
// 16): masks keys after the row on diagonal tiles, scales to log2 units, updates the running
// maxima and sums; leaves exp2(s - m) in sc and returns the factors by which O must be scaled.
struct RowState {
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;
};

__device__ __forceinline__ float2 softmax_tile(float (&sc)[32], RowState& st, int j0, bool diagonal,
                                               int row_lo, int c, float scale_log2) {
    const int row_hi = row_lo + 8;
    // The mask only on diagonal tiles (a uniform branch): comparing every key with its row cost
    // three instructions per score on every tile, and the softmax sits on the critical path.
    if (diagonal) {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            const int key = j0 + 8 * (i / 4) + 2 * c + (i & 1);
            if (key > ((i & 2) ? row_hi : row_lo)) sc[i] = -INFINITY;
        }
    }
    // Maxima and sums over 4 partials per row (score i: row hi when i & 2): chains of 4
    // dependent instructions, not 16. The maximum is taken unscaled (scale > 0 keeps it where it
    // is).
    float part[2][4];
    auto part_of = [&](int i) -> float& {
        return part[(i >> 1) & 1][(i & 1) + 2 * ((i >> 2) & 1)];
    };
#pragma unroll
    for (int k = 0; k < 8; ++k) part[k / 4][k % 4] = -INFINITY;
#pragma unroll
    for (int i = 0; i < 32; ++i) part_of(i) = fmaxf(part_of(i), sc[i]);
    float tmax_lo = fmaxf(fmaxf(part[0][0], part[0][1]), fmaxf(part[0][2], part[0][3]));
    float tmax_hi = fmaxf(fmaxf(part[1][0], part[1][1]), fmaxf(part[1][2], part[1][3]));
    tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, 1));
    tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, 2));
    tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, 1));
    tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, 2));
    const float mn_lo = fmaxf(st.m_lo, tmax_lo * scale_log2);
    const float mn_hi = fmaxf(st.m_hi, tmax_hi * scale_log2);
    // Rows that have seen no key yet (-inf) keep exp2 away from -inf - -inf.
    const float base_lo = mn_lo == -INFINITY ? 0.0f : mn_lo;
    const float base_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
    const float2 alpha = make_float2(ex2_ftz(st.m_lo - base_lo), ex2_ftz(st.m_hi - base_hi));
    st.m_lo = mn_lo;
    st.m_hi = mn_hi;
#pragma unroll
    for (int k = 0; k < 8; ++k) part[k / 4][k % 4] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        sc[i] = ex2_ftz(fmaf(sc[i], scale_log2, -((i & 2) ? base_hi : base_lo)));  // one FFMA
        part_of(i) += sc[i];
    }
    const float sum_lo = (part[0][0] + part[0][1]) + (part[0][2] + part[0][3]);
    const float sum_hi = (part[1][0] + part[1][1]) + (part[1][2] + part[1][3]);
    st.l_lo = st.l_lo * alpha.x + sum_lo;
    st.l_hi = st.l_hi * alpha.y + sum_hi;
    return alpha;
}

__device__ __forceinline__ void to_bf16_pairs(uint32_t (&pa)[16], const float (&sc)[32]) {
#pragma unroll
    for (int i = 0; i < 16; ++i) pa[i] = pack_bf16(sc[2 * i], sc[2 * i + 1]);
}

// Adds this warp's 16 rows of a 64 x 128 fp32 accumulator (the wgmma m64n128 layout) into
// global fp32 rows: `rows` is the warp's first row, `row_step` floats apart; rows from `valid`
// on are skipped. 32 columns at a time go through the warp's 2 KiB of shared memory `buf` (16
// rows x 32 fp32, 16-byte units swizzled by row) so that each reduction instruction adds 4
// whole 128-byte rows: 8-byte reductions straight from the accumulator layout ran the backward
// at half the speed.
__device__ __forceinline__ void add_rows(float* rows, int64_t row_step, int valid,
                                         const float (&acc)[64], unsigned char* buf) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
            const int j = 4 * ch + jj;
#pragma unroll
            for (int hi = 0; hi < 2; ++hi) {
                const int r = g + 8 * hi;
                const int unit = (2 * jj + (c >> 1)) ^ (r & 7);
                *reinterpret_cast<float2*>(buf + r * 128 + unit * 16 + (c & 1) * 8) =
                    make_float2(acc[4 * j + 2 * hi], acc[4 * j + 2 * hi + 1]);
            }
        }
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int rr = lane / 8 + 4 * i, u = lane % 8;
            const float4 v =
                *reinterpret_cast<const float4*>(buf + rr * 128 + ((u ^ (rr & 7)) * 16));
            if (rr < valid) red_add_v4(rows + rr * row_step + 32 * ch + 4 * u, v);
        }
        __syncwarp();  // the buffer is rewritten by the next chunk
    }
}

// A consumer warp's own staging buffer in shared memory: 16 rows of 128 bytes.
constexpr int kWarpStagingBytes = 16 * 128;

// Stages one 64-column chunk `ch` of this warp's 16 accumulator rows as bf16 in its staging
// buffer `buf`, for the forward's and the backward's epilogues and the dQ pass's. The wgmma
// layout: acc[4 j] and acc[4 j + 1] are row g, columns 8 j + 2 c and + 1; acc[4 j + 2],
// acc[4 j + 3] row g + 8. Row g is scaled by s_lo, row g + 8 by s_hi. The buffer holds 16 rows of
// kRowBytes (one chunk, 128, or several side by side), the chunk's 16-byte unit u of row r at
// r * kRowBytes + (u ^ r % 8) * 16 (the 8 rows of one 4-byte store fall in different banks),
// which is where the caller reads it back after a __syncwarp.
template <int kRowBytes = 128, int N>
__device__ __forceinline__ void stage_bf16_chunk(unsigned char* buf, const float (&acc)[N], int ch,
                                                 float s_lo, float s_hi, int lane) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
        const int j = 8 * ch + jj;
        const int at = ((jj ^ g) * 16) + 4 * c;  // rows g and g + 8: the same row % 8
        *reinterpret_cast<uint32_t*>(buf + g * kRowBytes + at) =
            pack_bf16(acc[4 * j] * s_lo, acc[4 * j + 1] * s_lo);
        *reinterpret_cast<uint32_t*>(buf + (g + 8) * kRowBytes + at) =
            pack_bf16(acc[4 * j + 2] * s_hi, acc[4 * j + 3] * s_hi);
    }
}

// Stores this warp's 16 rows of a 64 x 128 fp32 accumulator (the wgmma m64n128 layout) times
// `scale` as bf16 global rows: `rows` is the warp's first row, `row_step` elements apart; rows
// from `valid` on are skipped. 64 columns at a time go through the warp's 2 KiB of shared memory
// `buf` (16 rows x 128 bytes, 16-byte units swizzled by row) so that each store instruction
// writes 4 whole 128-byte row pieces rather than 4 bytes of 8 rows.
__device__ __forceinline__ void store_rows_bf16(__nv_bfloat16* rows, int64_t row_step, int valid,
                                                const float (&acc)[64], float scale,
                                                unsigned char* buf) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int ch = 0; ch < 2; ++ch) {
        stage_bf16_chunk(buf, acc, ch, scale, scale, lane);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int rr = lane / 8 + 4 * i, u = lane % 8;
            const uint4 v = *reinterpret_cast<const uint4*>(buf + rr * 128 + ((u ^ (rr & 7)) * 16));
            if (rr < valid) *reinterpret_cast<uint4*>(rows + rr * row_step + 64 * ch + 8 * u) = v;
        }
        __syncwarp();  // the buffer is rewritten by the next chunk
    }
}

// One block lists every (document, tile of kRows tokens) pair by descending work: the forward's
// item grows with the tile index m (keys up to the tile), the backward's shrinks with it (query
// tiles from the diagonal on), so the level of tile m of a document of n tiles is m, or n - 1 - m
// when kByRemaining. Counts per level, offsets from the highest level down (a block scan), then
// each document places its tiles. A warp takes a document, its lanes the document's tiles: one
// thread per document adding its tiles one after another (global atomics, each waiting for the
// last) was a visible share of the attention forward (docs/performance.md "Measured choices"). The
// order inside one level depends on atomics, which changes the schedule only, never a result.
// `next_item` (a persistent kernel's counter) and the int after it (its count of blocks done) are
// zeroed.
constexpr int kListThreads = 1024;
template <int kRows, bool kByRemaining>
__global__ void __launch_bounds__(kListThreads)
    list_tiles_kernel(int2* tiles, int* count, int* next_item, int* per_level, int* offsets,
                      const int32_t* cu, int num_docs, int levels) {
    using Scan = cub::BlockScan<int, kListThreads>;
    __shared__ typename Scan::TempStorage scan;
    __shared__ int placed;  // tiles of the levels scanned so far
    // The kernel that takes the list may be launched now (it waits for this grid's writes
    // before reading them): its launch and set-up overlap the listing.
    cuda::allow_dependent_launch();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr int kWarps = kListThreads / 32;
    if (threadIdx.x == 0) {
        next_item[0] = 0;
        next_item[1] = 0;
        placed = 0;
    }
    for (int i = threadIdx.x; i < levels; i += kListThreads) per_level[i] = 0;
    __syncthreads();
    auto tiles_of = [&](int d) { return (cu[d + 1] - cu[d] + kRows - 1) / kRows; };
    auto level_of = [](int n, int m) { return kByRemaining ? n - 1 - m : m; };
    for (int d = warp; d < num_docs; d += kWarps) {
        const int n = tiles_of(d);
        for (int m = lane; m < n; m += 32) atomicAdd(&per_level[level_of(n, m)], 1);
    }
    __syncthreads();
    for (int top = 0; top < levels; top += kListThreads) {  // top: levels counted from the highest
        const int m = levels - 1 - (top + static_cast<int>(threadIdx.x));
        const int tiles_here = m >= 0 ? per_level[m] : 0;
        int before, total;
        Scan(scan).ExclusiveSum(tiles_here, before, total);
        if (m >= 0) {
            offsets[m] = placed + before;
            per_level[m] = 0;
        }
        __syncthreads();  // every thread has read `placed` (and the scan's storage is free)
        if (threadIdx.x == 0) placed += total;
        __syncthreads();
    }
    if (threadIdx.x == 0) *count = placed;
    for (int d = warp; d < num_docs; d += kWarps) {
        const int n = tiles_of(d);
        for (int m = lane; m < n; m += 32) {
            const int level = level_of(n, m);
            tiles[offsets[level] + atomicAdd(&per_level[level], 1)] = make_int2(d, m);
        }
    }
}

// A (document, tile) list in device workspace, built by list_tiles_kernel: tiles of `rows`
// tokens, at most (tokens / rows rounded up) + num_docs of them, over as many levels as a
// document of `tokens` has tiles; 16 bytes of counters (count, next_item, blocks done) first.
inline int64_t tile_list_capacity(const GatedAttentionArgs& a, int rows) {
    return attention_tile_list_capacity(a.tokens, a.num_docs, rows);
}
inline int64_t tile_list_levels(const GatedAttentionArgs& a, int rows) {
    return attention_tile_list_levels(a.tokens, rows);
}
inline size_t tile_list_bytes(const GatedAttentionArgs& a, int rows) {
    return attention_tile_list_bytes(a.tokens, a.num_docs, rows);
}
struct TileList {
    int* count;      // entries listed
    int* next_item;  // zeroed: a persistent kernel's counter
    int* finished;   // zeroed: its blocks that have taken their last item
    int2* tiles;     // (document, tile), most work first
};
// The list in `workspace` (built there by build_tile_list).
inline TileList tile_list_at(void* workspace) {
    auto* ws = static_cast<unsigned char*>(workspace);
    auto* counters = reinterpret_cast<int*>(ws);
    return TileList{counters, counters + 1, counters + 2, reinterpret_cast<int2*>(ws + 16)};
}
// Lists a's tiles into `workspace` (tile_list_bytes(a, kRows), 16-byte aligned) on `stream`.
template <int kRows, bool kByRemaining>
cudaError_t build_tile_list(void* workspace, const GatedAttentionArgs& a, cudaStream_t stream,
                            TileList* list) {
    auto* ws = static_cast<unsigned char*>(workspace);
    *list = tile_list_at(workspace);
    int* per_level = reinterpret_cast<int*>(ws + 16 + 8 * tile_list_capacity(a, kRows));
    const int64_t levels = tile_list_levels(a, kRows);
    list_tiles_kernel<kRows, kByRemaining><<<1, kListThreads, 0, stream>>>(
        list->tiles, list->count, list->next_item, per_level, per_level + levels, a.cu_seqlens,
        static_cast<int>(a.num_docs), static_cast<int>(levels));
    return cudaGetLastError();
}

// Element offset of the backward's dS^T tile for query tile t and key tile k <= t (64-token
// tiles from the document's start) of query head h, the document's tile pairs starting at
// pair_base (attention_wgmma_dq.h has the layout): written by the main backward kernel,
// read by the dQ pass.
__device__ __forceinline__ int64_t ds_tile_at(int64_t pair_base, int t, int k, int q_heads, int h) {
    const int64_t pair = pair_base + static_cast<int64_t>(t) * (t + 1) / 2 + k;
    return (pair * q_heads + h) * (kBn * kBn);
}

}  // namespace deltatune::wgmma_attention
