// Gated varlen causal GQA attention backward on wgmma + TMA (see attention_wgmma.h).
//
// Passes: attention_gate_backward_from_y forms d_o = dy * sigmoid(gate), dgate and
// delta = rowsum(d_o y / sigmoid(gate)) (= rowsum(d_o o));
// list_tiles_kernel lists the (document, key tile of 64) pairs with the most query tiles first;
// the main kernel runs one block per (key tile, kv head); then dQ either comes from the dS^T
// tiles the main kernel stored (attention_wgmma_dq.cu: no atomics, the default while the
// tiles fit kAttentionDsBudget) or, past the budget, from fp32 sums the main kernel added into,
// which dq_finish_kernel scales into bf16.
//
// Main kernel, one block of 3 warpgroups per (key tile, kv head), keys k0 .. k0 + 63 of one
// document. K and V stay in shared memory; the block steps over the group's query heads and the
// query tiles of 64 rows from the diagonal one to the document's end.
//   warpgroup 0, warp 0: the producer. Per step: Q and d_o of the tile by TMA into a two-stage
//     ring, lse (in log2 units, +inf for rows past the document: P = 0 there) and delta by the
//     warp's lanes; the stage's "full" mbarrier takes the bytes and 33 arrivals (kFullArrivals).
//   warpgroups 1, 2: consumers. Per step, warpgroup w computes, for its 32 of the tile's queries,
//     S^T = K Q^T and dP^T = V dO^T (64 keys x 32 queries, wgmma m64n32k16 over head_dim), then
//     P^T = exp2(S^T scale log2 e - lse) (causal mask on the diagonal tile) and
//     dS^T = P^T (dP^T - delta) (0 on a document's first row, which attends to one key: delta
//     from y does not cancel dP there to the last bit, as delta from o did), written as bf16
//     into shared 64 x 64 tiles. Once both halves are there, warpgroup w owns head_dim columns
//     128 w .. + 127 of
//       dV += P^T dO and dK += dS^T Q (64 x 128 fp32 accumulators each, across all steps);
//     and dS^T leaves for memory as one 8 KiB bulk copy (kStoreDs), or warpgroup w computes
//       dQ = dS K for its columns and adds the 64 x 128 fp32 partial to the global sums
//       (red.global.add, staged through shared memory so that each instruction adds whole
//       128-byte rows), whose bits then depend on the order the key tiles' blocks add in.
//     Registers: 24 for the producer warpgroup, 240 for the consumers.
// dK (times the scale) and dV are stored as bf16 for the keys inside the document.
#include <algorithm>
#include <cstddef>

#include "kernels/attention/attention_gate.h"
#include "kernels/attention/attention_wgmma.h"
#include "kernels/attention/attention_wgmma_dq.h"
#include "kernels/attention/attention_wgmma_tile.cuh"
#include "kernels/common/code_arch.h"
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/hopper.cuh"

namespace deltatune {

namespace {

using bf16 = __nv_bfloat16;
using namespace hopper;
using namespace wgmma_attention;

constexpr int kTile = kBn;            // keys per block, query rows per step
constexpr int kTileBytes = kKvBytes;  // a K, V, Q or d_o tile
constexpr int kChunkBytes = kTileChunkBytes;
constexpr int kPBytes = kDsTileBytes;  // P^T or dS^T
constexpr int kBwdStages = 2;
// A stage is full once its tiles' bytes have landed and 33 arrivals are in: lane 0's with the
// expected bytes, and each producer lane's after storing its rows' lse and delta.
constexpr int kFullArrivals = 33;
// Shared memory, from its 1024-byte-aligned base. The layout is this struct; the kernels address
// it through the offsets below (taken from it), and the launch's size is its size plus the
// alignment slack, so layout, addresses and launch cannot disagree.
struct BwdSmem {
    unsigned char k[kTileBytes];
    unsigned char v[kTileBytes];
    struct Stage {
        unsigned char q[kTileBytes];
        unsigned char d_o[kTileBytes];
    } stages[kBwdStages];
    unsigned char p[kPBytes];           // P^T
    unsigned char ds[kPBytes];          // dS^T
    float rows[kBwdStages][2 * kTile];  // per stage: lse2[kTile], then delta[kTile]
    unsigned char staging[kConsumerWarps][kWarpStagingBytes];  // 2 KiB per consumer warp
    uint64_t bars[8];  // kv_full, full[kBwdStages], empty[kBwdStages]; room to spare
};
static_assert(1 + 2 * kBwdStages <= 8);
constexpr int kOffV = offsetof(BwdSmem, v);
constexpr int kOffStages = offsetof(BwdSmem, stages);
constexpr int kOffP = offsetof(BwdSmem, p);
constexpr int kOffDs = offsetof(BwdSmem, ds);
constexpr int kOffRows = offsetof(BwdSmem, rows);
constexpr int kOffStaging = offsetof(BwdSmem, staging);
constexpr int kOffBars = offsetof(BwdSmem, bars);
constexpr int kSmemBytes = 1024 + static_cast<int>(sizeof(BwdSmem));  // + alignment
// TMA boxes and wgmma operands in the 128-byte swizzle start on 1024-byte boundaries.
static_assert(kOffV % 1024 == 0 && kOffStages % 1024 == 0 && kTileBytes % 1024 == 0 &&
                  kOffP % 1024 == 0 && kOffDs % 1024 == 0,
              "swizzled tiles must be 1024-byte aligned");
static_assert(kOffStaging % 16 == 0 && kOffBars % 8 == 0, "bulk copies and mbarriers");

struct Params {
    const int2* tiles;  // (document, key tile), most query tiles first
    const int* tile_count;
    const int32_t* cu;
    const float* lse;
    const float* delta;
    float* dq_acc;  // (tokens, q_heads, 256) fp32, zeroed (dQ by atomics)
    bf16* ds;       // the dS^T tiles (dQ from memory; attention_wgmma_dq.h has the layout)
    const int64_t* pair_base;
    bf16* dk;
    bf16* dv;
    int q_heads, kv_heads, group;
    float scale, scale_log2;
};

// The block's key tile: keys k0 .. k0 + 63 of the document [doc_begin, doc_end), tile m of its
// n; `steps` = query heads of the group x query tiles m .. n - 1 (0: nothing to do).
struct Block {
    int kvh = 0, doc = 0, doc_begin = 0, doc_end = 0, k0 = 0, m = 0, nq = 0, steps = 0;
    // Step s: query head and first query row.
    __device__ int head(int s, int group) const { return kvh * group + s / nq; }
    __device__ int q0(int s) const { return doc_begin + (m + s % nq) * kTile; }
};

__device__ __forceinline__ Block block_of(const Params& p) {
    Block b;
    const int idx = static_cast<int>(blockIdx.x) / p.kv_heads;  // consecutive: same key tile
    b.kvh = static_cast<int>(blockIdx.x) % p.kv_heads;
    if (idx >= *p.tile_count) return b;
    const int2 t = p.tiles[idx];
    b.doc = t.x;
    b.doc_begin = p.cu[t.x];
    b.doc_end = p.cu[t.x + 1];
    b.m = t.y;
    b.k0 = b.doc_begin + t.y * kTile;
    b.nq = (b.doc_end - b.doc_begin + kTile - 1) / kTile - t.y;
    b.steps = b.nq * p.group;
    return b;
}

struct Bars {
    uint64_t *kv_full, *full, *empty;  // full / empty: per stage
};
__device__ __forceinline__ Bars bars_at(unsigned char* smem) {
    auto* b = reinterpret_cast<uint64_t*>(smem + kOffBars);
    return Bars{b, b + 1, b + 1 + kBwdStages};
}
__device__ __forceinline__ unsigned char* q_at(unsigned char* smem, int st) {
    return smem + kOffStages + st * 2 * kTileBytes;
}
__device__ __forceinline__ float* lse2_at(unsigned char* smem, int st) {
    return reinterpret_cast<float*>(smem + kOffRows) + st * 2 * kTile;
}

// The producer warp: K and V once, then per step the stage's Q and d_o tiles (lane 0, TMA) and
// its rows' lse2 and delta (all lanes).
__device__ __forceinline__ void produce(const Params& p, const Block& b, const CUtensorMap* tq,
                                        const CUtensorMap* tdo, const CUtensorMap* tk,
                                        const CUtensorMap* tv, unsigned char* smem) {
    const int lane = threadIdx.x & 31;
    const Bars bar = bars_at(smem);
    if (lane == 0) {
        mbar_arrive_expect_tx(bar.kv_full, 2 * kTileBytes);
        for (int c = 0; c < kChunks; ++c) {
            const int col = b.kvh * kD + c * kChunkCols;
            tma_load_2d(smem + c * kChunkBytes, tk, col, b.k0, bar.kv_full);
            tma_load_2d(smem + kOffV + c * kChunkBytes, tv, col, b.k0, bar.kv_full);
        }
    }
    for (int s = 0; s < b.steps; ++s) {
        const int st = s % kBwdStages;
        const int h = b.head(s, p.group), q0 = b.q0(s);
        // The rows' terms are loaded before the stage is free and stored after its tiles are
        // asked for: stored first, they had held each step's TMA behind a global load.
        float lse_r[kTile / 32], delta_r[kTile / 32];
#pragma unroll
        for (int i = 0; i < kTile / 32; ++i) {
            const int q = q0 + lane + 32 * i;
            const bool in = q < b.doc_end;
            const int64_t at = static_cast<int64_t>(q) * p.q_heads + h;
            lse_r[i] = in ? p.lse[at] * kLog2e : INFINITY;
            delta_r[i] = in ? p.delta[at] : 0.0f;
        }
        if (s >= kBwdStages) mbar_wait(&bar.empty[st], ((s / kBwdStages) - 1) & 1);
        if (lane == 0) {
            unsigned char* qs = q_at(smem, st);
            mbar_arrive_expect_tx(&bar.full[st], 2 * kTileBytes);
            for (int c = 0; c < kChunks; ++c) {
                const int col = h * kD + c * kChunkCols;
                tma_load_2d(qs + c * kChunkBytes, tq, col, q0, &bar.full[st]);
                tma_load_2d(qs + kTileBytes + c * kChunkBytes, tdo, col, q0, &bar.full[st]);
            }
        }
        float* lse2 = lse2_at(smem, st);
#pragma unroll
        for (int i = 0; i < kTile / 32; ++i) {
            lse2[lane + 32 * i] = lse_r[i];
            lse2[kTile + lane + 32 * i] = delta_r[i];
        }
        mbar_arrive(&bar.full[st]);  // all 32 lanes, after their stores (see kFullArrivals)
    }
}

// Byte offset of element (row, col) of a 64 x 64 bf16 tile in the 128-byte swizzled layout.
__device__ __forceinline__ int swizzled(int row, int col) {
    return row * 128 + (((col >> 3) ^ (row & 7)) << 4) + (col & 7) * 2;
}

// kStoreDs: each step's dS^T tile goes to memory for attention_wgmma_dq.cu (one bulk
// copy from shared memory, issued by the first consumer thread); otherwise dQ's partial is
// computed here and added to the fp32 sums.
template <bool kStoreDs>
__device__ __forceinline__ void consume(const Params& p, const Block& b, unsigned char* smem,
                                        int w) {
    const int tid = threadIdx.x & 127;
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const Bars bar = bars_at(smem);
    const uint32_t k_base = smem_addr(smem), v_base = smem_addr(smem + kOffV);
    const uint32_t p_base = smem_addr(smem + kOffP), ds_base = smem_addr(smem + kOffDs);
    const int row_lo = 16 * warp + g;  // this thread's keys (S^T rows) and dQ rows: + 0 and + 8
    // The warp's staging buffer (add_rows, then the dK / dV stores), found where it is used: held
    // in a register across the steps it changed the main loop's code.
    auto staging = [&] { return smem + kOffStaging + (4 * w + warp) * kWarpStagingBytes; };
    float dk[64], dv[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) dk[i] = dv[i] = 0.0f;
    // dV += P^T dO and dK += dS^T Q for this warpgroup's half of head_dim, one group.
    auto issue_dkdv = [&](uint32_t q_base, uint32_t do_base) {
        // A: P^T, dS^T (K-major); B: this warpgroup's 128 columns of d_o, Q (MN-major).
        const uint64_t pt_desc = sw128_desc(p_base, 16, 1024);
        const uint64_t dst_desc = sw128_desc(ds_base, 16, 1024);
        const uint64_t do_cols = sw128_desc(do_base + 2 * w * kChunkBytes, kChunkBytes, 1024);
        const uint64_t q_cols = sw128_desc(q_base + 2 * w * kChunkBytes, kChunkBytes, 1024);
#pragma unroll
        for (int kk = 0; kk < kTile / 16; ++kk) {
            wgmma_m64n128k16_ss_tb<0>(dv, desc_at(pt_desc, kk * 32), desc_at(do_cols, kk * 2048),
                                      1);
            wgmma_m64n128k16_ss_tb<0>(dk, desc_at(dst_desc, kk * 32), desc_at(q_cols, kk * 2048),
                                      1);
        }
        wgmma_commit();
    };
    // The document's first tile pair for the dS tiles' addresses, read once: read per step, it
    // held the storer's bulk copy, and with it its warp's next wgmma, behind a global load.
    const int64_t pair_base = kStoreDs ? p.pair_base[b.doc] : 0;
    mbar_wait(bar.kv_full, 0);
    for (int s = 0; s < b.steps; ++s) {
        const int st = s % kBwdStages;
        const int h = b.head(s, p.group), q0 = b.q0(s);
        mbar_wait(&bar.full[st], (s / kBwdStages) & 1);
        const uint32_t q_base = smem_addr(q_at(smem, st)), do_base = q_base + kTileBytes;
        // S^T and dP^T for queries 32 w .. + 31 of the tile.
        float sc[16], dp[16];
        wgmma_fence();
        {  // A: K, V (K-major); B: this warpgroup's 32 rows of Q, d_o (K-major)
            const uint64_t k_desc = sw128_desc(k_base, 16, 1024),
                           v_desc = sw128_desc(v_base, 16, 1024);
            const uint64_t q_rows = sw128_desc(q_base + 32 * w * 128, 16, 1024);
            const uint64_t do_rows = sw128_desc(do_base + 32 * w * 128, 16, 1024);
#pragma unroll
            for (int kk = 0; kk < kD / 16; ++kk) {
                const uint32_t at = (kk / 4) * kChunkBytes + (kk % 4) * 32;
                wgmma_m64n32k16_ss(sc, desc_at(k_desc, at), desc_at(q_rows, at), kk > 0);
            }
#pragma unroll
            for (int kk = 0; kk < kD / 16; ++kk) {
                const uint32_t at = (kk / 4) * kChunkBytes + (kk % 4) * 32;
                wgmma_m64n32k16_ss(dp, desc_at(v_desc, at), desc_at(do_rows, at), kk > 0);
            }
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(sc);
        fence_regs(dp);
        const float* lse2 = lse2_at(smem, st);
        const bool diagonal = s % b.nq == 0;
        // This thread holds the tile's query 0 (its elements i < 4, e = 0), and that is the
        // document's first row: see below.
        const bool first_row = q0 == b.doc_begin && w == 0 && c == 0;
        uint32_t pp[8], dsp[8];
#pragma unroll
        for (int i = 0; i < 16; i += 2) {
            const int key = b.k0 + row_lo + 8 * ((i >> 1) & 1);
            const int col = 32 * w + 8 * (i / 4) + 2 * c;  // query within the tile
            float pv[2], dsv[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float pr = ex2_ftz(sc[i + e] * p.scale_log2 - lse2[col + e]);
                if (diagonal && q0 + col + e < key) pr = 0.0f;
                pv[e] = pr;
                dsv[e] = pr * (dp[i + e] - lse2[kTile + col + e]);
                // A document's first row attends to one key: P = 1 and the softmax's gradient
                // is exactly 0. Computed, dP - delta would leave y's rounding there (from o,
                // which is v exactly on such a row, it cancelled to the last bit).
                if (first_row && i < 4 && e == 0) dsv[e] = 0.0f;
            }
            pp[i / 2] = pack_bf16(pv[0], pv[1]);
            dsp[i / 2] = pack_bf16(dsv[0], dsv[1]);
        }
        const bool storer = kStoreDs && w == 0 && tid == 0;
        if (storer) bulk_wait_read();  // the previous step's dS^T has left shared memory
        named_barrier(1, 256);         // both warpgroups' products of the previous step are done
#pragma unroll
        for (int i = 0; i < 16; i += 2) {
            const int off = swizzled(row_lo + 8 * ((i >> 1) & 1), 32 * w + 8 * (i / 4) + 2 * c);
            *reinterpret_cast<uint32_t*>(smem + kOffP + off) = pp[i / 2];
            *reinterpret_cast<uint32_t*>(smem + kOffDs + off) = dsp[i / 2];
        }
        fence_proxy_async_smem();
        named_barrier(1, 256);  // both halves of P^T and dS^T written
        // dQ = dS K (A: dS^T stored key-major, read transposed), then dV += P^T dO, dK += dS^T Q.
        if constexpr (kStoreDs) {
            if (storer) {
                const int t = (q0 - b.doc_begin) / kTile;
                bulk_store(p.ds + ds_tile_at(pair_base, t, b.m, p.q_heads, h), smem + kOffDs,
                           kPBytes);
            }
            fence_regs(dk);
            fence_regs(dv);
            wgmma_fence();
            issue_dkdv(q_base, do_base);
        } else {
            float dq[64];
            fence_regs(dk);
            fence_regs(dv);
            wgmma_fence();
            // A: dS^T read transposed (MN-major); B: this warpgroup's 128 columns of K.
            const uint64_t ds_mn = sw128_desc(ds_base, kChunkBytes, 1024);
            const uint64_t k_cols = sw128_desc(k_base + 2 * w * kChunkBytes, kChunkBytes, 1024);
#pragma unroll
            for (int kk = 0; kk < kTile / 16; ++kk) {
                wgmma_m64n128k16_ss_tb<1>(dq, desc_at(ds_mn, kk * 2048), desc_at(k_cols, kk * 2048),
                                          kk > 0);
            }
            wgmma_commit();
            issue_dkdv(q_base, do_base);
            wgmma_wait<1>();
            fence_regs(dq);
            add_rows(
                p.dq_acc + (static_cast<int64_t>(q0 + 16 * warp) * p.q_heads + h) * kD + 128 * w,
                static_cast<int64_t>(p.q_heads) * kD, b.doc_end - (q0 + 16 * warp), dq, staging());
        }
        wgmma_wait<0>();
        fence_regs(dk);
        fence_regs(dv);
        __syncwarp();
        if (lane == 0) mbar_arrive(&bar.empty[st]);
    }
    if (kStoreDs && w == 0 && tid == 0) bulk_wait();  // the dS^T tiles are in memory
    // dK = scale dS^T Q and dV, rows inside the document, through the warp's staging buffer
    // (free here: add_rows is done with it).
    const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * kD;
    const int64_t first = (b.k0 + 16 * warp) * kv_stride + b.kvh * kD + 128 * w;
    const int valid = b.doc_end - (b.k0 + 16 * warp);
    store_rows_bf16(p.dk + first, kv_stride, valid, dk, p.scale, staging());
    store_rows_bf16(p.dv + first, kv_stride, valid, dv, 1.0f, staging());
}

template <bool kStoreDs>
__global__ void __launch_bounds__(kThreads, 1)
    attention_backward_wgmma_kernel(const __grid_constant__ CUtensorMap tq,
                                    const __grid_constant__ CUtensorMap tdo,
                                    const __grid_constant__ CUtensorMap tk,
                                    const __grid_constant__ CUtensorMap tv, const Params p) {
#if DT_HOPPER_CODE
    const Block b = block_of(p);
    if (b.steps == 0) return;  // past the list's end
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = align1024(smem_raw);
    if (threadIdx.x == 0) {
        const Bars bar = bars_at(smem);
        mbar_init(bar.kv_full, 1);
        for (int i = 0; i < kBwdStages; ++i) {
            mbar_init(&bar.full[i], kFullArrivals);
            mbar_init(&bar.empty[i], kConsumerWarps);
        }
        mbar_fence_init();
    }
    __syncthreads();
    const int wg = warpgroup_index();
    if (wg == 0) {
        regs_dec<kProducerRegs>();
        if (threadIdx.x < 32) produce(p, b, &tq, &tdo, &tk, &tv, smem);
    } else {
        regs_inc<kConsumerRegs>();
        consume<kStoreDs>(p, b, smem, wg - 1);
    }
#else
    __trap();  // never launched without sm_90a code (DT_HOPPER_CODE)
#endif
}

// dq = bf16(scale * dq_acc), 4 values per thread.
__global__ void dq_finish_kernel(bf16* dq, const float* dq_acc, int64_t n4, float scale) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float4 v = reinterpret_cast<const float4*>(dq_acc)[i];
        uint2 out;
        out.x = pack_bf16(v.x * scale, v.y * scale);
        out.y = pack_bf16(v.z * scale, v.w * scale);
        reinterpret_cast<uint2*>(dq)[i] = out;
    }
}

struct MapOf {
    CUtensorMap* map;
    const bf16* base;
    int64_t cols;
};

// The workspace: attention_backward_layout (attention.h), whose head_dim and tile rows are
// these kernels'.
static_assert(kD == 256 && kTile == 64);
AttentionBackwardLayout layout_of(const GatedAttentionArgs& a, bool ds_mode) {
    return attention_backward_layout(a.tokens, a.num_docs, a.max_doc_tokens, a.q_heads, ds_mode);
}

}  // namespace

size_t gated_attention_backward_wgmma_workspace_bytes(const GatedAttentionArgs& a,
                                                      size_t ds_budget) {
    return layout_of(a, attention_ds_tile_bytes(a) <= ds_budget).total;
}

cudaError_t gated_attention_backward_wgmma(bf16* dq, bf16* dk, bf16* dv, bf16* dgate,
                                           const bf16* dy, const bf16* y, const float* lse,
                                           const GatedAttentionArgs& a, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream,
                                           size_t ds_budget) {
    if (!gated_attention_supported(a)) return cudaErrorInvalidValue;
    if (loaded_code().arch < kHopperCodeArch) return cudaErrorNoKernelImageForDevice;
    if (a.tokens == 0) return cudaSuccess;
    const bool ds_mode = attention_ds_tile_bytes(a) <= ds_budget;
    const AttentionBackwardLayout l = layout_of(a, ds_mode);
    if (workspace_bytes < l.total || !cuda::aligned16(workspace) || !cuda::aligned16(dy) ||
        !cuda::aligned16(y) || !cuda::aligned16(dq) || !cuda::aligned16(dk) ||
        !cuda::aligned16(dv) || tile_list_capacity(a, kTile) * a.q_heads > INT32_MAX ||
        a.tokens > INT32_MAX / 2 || a.q_heads * kD > INT32_MAX) {
        return cudaErrorInvalidValue;
    }
    const size_t rows = static_cast<size_t>(a.tokens * a.q_heads);
    auto* ws = static_cast<unsigned char*>(workspace);
    auto* d_o = reinterpret_cast<bf16*>(ws + l.d_o);
    auto* delta = reinterpret_cast<float*>(ws + l.delta);
    auto* pair_base = reinterpret_cast<int64_t*>(ws + l.pair_base);
    auto* ds = reinterpret_cast<bf16*>(ws + l.ds);
    auto* dq_acc = reinterpret_cast<float*>(ws + l.dq_acc);

    if (cudaError_t e = attention_gate_backward_from_y(
            d_o, delta, dgate, dy, y, {a.gate, a.gate_token_stride, a.gate_head_stride}, a.tokens,
            a.q_heads, stream);
        e != cudaSuccess) {
        return e;
    }
    if (cudaError_t e = ds_mode ? attention_ds_pair_base(pair_base, a, stream)
                                : cudaMemsetAsync(dq_acc, 0, sizeof(float) * rows * kD, stream);
        e != cudaSuccess) {
        return e;
    }
    TileList keys;
    if (cudaError_t e = build_tile_list<kTile, true>(ws + l.key_list, a, stream, &keys);
        e != cudaSuccess) {
        return e;
    }

    CUtensorMap tq, tdo, tk, tv;
    const int64_t q_cols = a.q_heads * kD, kv_cols = a.kv_heads * kD;
    for (const auto& [map, base, cols] : {MapOf{&tq, a.q, q_cols}, MapOf{&tdo, d_o, q_cols},
                                          MapOf{&tk, a.k, kv_cols}, MapOf{&tv, a.v, kv_cols}}) {
        if (cudaError_t e = tensor_map_sw128(map, base, a.tokens, cols, kTile); e != cudaSuccess) {
            return e;
        }
    }
    const Params p{keys.tiles,
                   keys.count,
                   a.cu_seqlens,
                   lse,
                   delta,
                   ds_mode ? nullptr : dq_acc,
                   ds_mode ? ds : nullptr,
                   pair_base,
                   dk,
                   dv,
                   static_cast<int>(a.q_heads),
                   static_cast<int>(a.kv_heads),
                   static_cast<int>(a.q_heads / a.kv_heads),
                   a.scale,
                   a.scale * kLog2e};
    auto* kernel =
        ds_mode ? attention_backward_wgmma_kernel<true> : attention_backward_wgmma_kernel<false>;
    if (cudaError_t e =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        e != cudaSuccess) {
        return e;
    }
    const auto blocks = static_cast<unsigned>(tile_list_capacity(a, kTile) * a.kv_heads);
    kernel<<<blocks, kThreads, kSmemBytes, stream>>>(tq, tdo, tk, tv, p);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (ds_mode) return attention_ds_dq(dq, ds, pair_base, a, ws + l.dq_list, stream);
    const int64_t n4 = static_cast<int64_t>(rows) * kD / 4;
    const auto fblocks = static_cast<unsigned>(std::min<int64_t>((n4 + 255) / 256, 4096));
    dq_finish_kernel<<<fblocks, 256, 0, stream>>>(dq, dq_acc, n4, a.scale);
    return cudaGetLastError();
}

}  // namespace deltatune
