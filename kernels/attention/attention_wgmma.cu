// Gated varlen causal GQA attention forward on wgmma + TMA (see attention_wgmma.h).
//
// Work items are (query tile of 128 rows, query head), listed longest-first by
// list_tiles_kernel. The kernel is persistent: one block of 3 warpgroups per SM takes items off
// the list through an atomic counter.
//   warpgroup 0, thread 0: the producer. Per item: Q once the previous item's is released, then
//     the K and V tiles of 64 keys through two-stage rings of their own (K_t is free after S_t,
//     V_t only after O += P_t V_t), waiting for each stage's "empty" mbarrier (all 8 consumer
//     warps done with it); TMA completes the stage's "full" mbarrier with the bytes it expects;
//     and the item's first kGateTmaChunks 64-column chunks of the gate for the epilogue.
//   warpgroups 1, 2: consumers, 64 query rows each. Per key tile t: S_t = Q K_t^T (16 wgmma
//     m64n64k16 from shared memory) issued together with O += P_{t-1} V_{t-1} (4 wgmma
//     m64n256k16, P from registers: the accumulator layout of S is the A-operand layout), then
//     the masked online softmax of S_t (exp2 of scores pre-scaled by scale * log2 e) runs while
//     that product is in flight. The two warpgroups take turns issuing (named barriers), so one's
//     softmax overlaps the other's products. O is 128 fp32 registers per thread, hence
//     setmaxnreg: consumers 232, the producer 32.
// Epilogue, per warp and 64-column chunk: O / l rounded to bf16 staged in 2 KiB of shared
// memory, written as whole rows of o (unless o is null) and of y = o * sigmoid(gate); lse per row.
// The kernel is launched as a programmatic dependent of the kernel before it (when that is the
// tile list's, its launch and set-up overlap the listing); a batch's forwards can share one list.
// Keys before the document's start are never loaded (the key range starts there); keys after a
// row are masked; rows past the document are computed on whatever follows and not stored.
#include <algorithm>
#include <cstddef>

#include "kernels/attention/attention_wgmma.h"
#include "kernels/attention/attention_wgmma_tile.cuh"
#include "kernels/common/code_arch.h"
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/hopper.cuh"

namespace deltatune {

namespace {

using bf16 = __nv_bfloat16;
using namespace hopper;
using namespace wgmma_attention;

// The epilogue's gate. Its first two 64-column chunks (16 KiB each for the item's 128 rows) are
// brought by the producer's TMA, the first into the staging buffers, idle until the epilogue
// (each warp's 2 KiB are its own 16 rows, swizzled as the staging is), the second into a buffer
// of its own, once the previous item's epilogue is done with them: the warps' own loads, issued
// as the last product ran, were what the epilogue waited on most (ncu: 5% of all consumer
// samples at the first use). The other two are loaded by the warps while the last product runs
// (all of theirs in flight together).
constexpr int kGateTmaChunks = 2;
static_assert(kGateTmaChunks == 2);  // one into the staging buffers, one into its own buffer
// The producer brings an item's first gate chunks once the item's first kGateAfterTiles key tiles
// are on their way (waiting for the previous epilogue then delays no tile the consumers need).
constexpr int kGateAfterTiles = 2;
// The producer's gate loads need more than the 24 registers the backward's producers keep (it
// spilled its item's fields); the consumers' O, scores and gate fit in 232.
constexpr int kFwdProducerRegs = 32, kFwdConsumerRegs = 232;
static_assert(kFwdProducerRegs * 128 + 2 * kFwdConsumerRegs * 128 <= 168 * kThreads);
constexpr int kStagingBytes = kConsumerWarps * kWarpStagingBytes;  // the epilogue's
// The gate's second chunk has a buffer of its own (the staging's size) in what shared memory is
// left.
constexpr int kGateBytes = kStagingBytes;

struct Params {
    const int2* tiles;  // (document, query tile) longest-first
    const int* tile_count;
    int* next_item;  // items taken so far (zeroed by list_tiles_kernel and by the last block)
    int* finished;   // blocks that have taken their last item
    const int32_t* cu;
    bf16* y;
    bf16* o;
    float* lse;
    const bf16* gate;
    int64_t gate_token_stride, gate_head_stride;
    int q_heads, group;
    float scale_log2;
};

// One work item: query tile `tile` of a document, for query head h.
struct Item {
    int h, doc_begin, q0, q_end, n_tiles;
};

__device__ __forceinline__ Item item_of(const Params& p, int w) {
    const int2 tile = p.tiles[w / p.q_heads];
    Item it;
    it.h = w % p.q_heads;  // consecutive items: heads sharing K/V run side by side
    it.doc_begin = p.cu[tile.x];
    it.q0 = it.doc_begin + tile.y * kBm;
    it.q_end = min(p.cu[tile.x + 1], it.q0 + kBm);
    it.n_tiles = (it.q_end - it.doc_begin + kBn - 1) / kBn;
    return it;
}

// Barriers: Q full / Q empty (the consumers' last wgmma on this Q is done), then per stage of
// the K ring and of the V ring full and empty; `item`: the item whose Q the last q_full phase
// brought (h = -1: none left), written by the producer before it arrives on q_full, so that
// the consumers need not look it up in global memory again.
struct Bars {
    uint64_t *q_full, *q_empty, *k_full, *k_empty, *v_full, *v_empty, *gate_full, *gate_empty;
    Item* item;
};

// Shared memory, from its 1024-byte-aligned base. The layout is this struct; the kernel addresses
// it through offsets taken from it, and the launch's size is its size plus the alignment slack.
struct FwdSmem {
    unsigned char q[kQBytes];
    unsigned char k[kStages][kKvBytes];
    unsigned char v[kStages][kKvBytes];
    unsigned char staging[kStagingBytes];  // the epilogue's; the gate's first chunk
    unsigned char gate[kGateBytes];        // the gate's second chunk
    unsigned char bars[128];               // the mbarriers (Bars), then the block's Item
};
constexpr int kOffK = offsetof(FwdSmem, k);
constexpr int kOffV = offsetof(FwdSmem, v);
constexpr int kOffStaging = offsetof(FwdSmem, staging);
constexpr int kOffBars = offsetof(FwdSmem, bars);
constexpr int kSmemBytes = 1024 + static_cast<int>(sizeof(FwdSmem));  // + alignment
static_assert((4 + 4 * kStages) * 8 + sizeof(Item) <= sizeof(FwdSmem::bars));
// TMA boxes and wgmma operands in the 128-byte swizzle start on 1024-byte boundaries.
static_assert(kOffK % 1024 == 0 && kOffV % 1024 == 0 && kKvBytes % 1024 == 0,
              "swizzled tiles must be 1024-byte aligned");
static_assert(kOffStaging % 16 == 0 && kOffBars % 8 == 0, "bulk copies and mbarriers");

__device__ __forceinline__ Bars bars_at(unsigned char* smem) {
    auto* b = reinterpret_cast<uint64_t*>(smem + kOffBars);
    return Bars{b,
                b + 1,
                b + 2,
                b + 2 + kStages,
                b + 2 + 2 * kStages,
                b + 2 + 3 * kStages,
                b + 2 + 4 * kStages,
                b + 3 + 4 * kStages,
                reinterpret_cast<Item*>(b + 4 + 4 * kStages)};
}

__device__ __forceinline__ unsigned char* staging(unsigned char* smem) {
    return smem + kOffStaging;
}
__device__ __forceinline__ unsigned char* gate_chunk1(unsigned char* smem) {
    return staging(smem) + kStagingBytes;
}

__device__ __forceinline__ unsigned char* k_stage(unsigned char* smem, int s) {
    return smem + kOffK + s * kKvBytes;
}
__device__ __forceinline__ unsigned char* v_stage(unsigned char* smem, int s) {
    return smem + kOffV + s * kKvBytes;
}

// The producer (one thread): takes the next item off the list (an atomic counter: blocks that
// finish early take more, as the hardware's own block scheduler would), loads its Q once the
// previous item's is free, then its K and V tiles through their rings, whose position `ring`
// runs on across items. K and V have rings of their own because a consumer is done with K_t
// (after S_t) an iteration before it is done with V_t (after O += P_t V_t).
__device__ __forceinline__ void produce(const Params& p, const CUtensorMap* tq,
                                        const CUtensorMap* tk, const CUtensorMap* tv,
                                        const CUtensorMap* tg, unsigned char* smem, int items) {
    const Bars b = bars_at(smem);
    int ring = 0;
    // The next item is taken once the current one's loads are all issued, and looked up before
    // waiting for Q to be free.
    int w = atomicAdd(p.next_item, 1);
    for (int done = 0;; ++done) {  // items loaded so far
        const Item it = w < items ? item_of(p, w) : Item{-1, 0, 0, 0, 0};
        if (done > 0) mbar_wait(b.q_empty, (done - 1) & 1);
        *b.item = it;
        if (it.h < 0) {
            mbar_arrive(b.q_full);
            // The last block to run out of items zeroes the counters (every block has taken its
            // last index by then), so that the next forward on the same list starts afresh.
            __threadfence();
            if (atomicAdd(p.finished, 1) == static_cast<int>(gridDim.x) - 1) {
                __threadfence();
                *p.next_item = 0;
                *p.finished = 0;
            }
            return;
        }
        const int kvh = it.h / p.group;
        // The first two gate chunks into their buffers, once the previous item's epilogue has
        // left them (every consumer warp arrives on gate_empty after its last staged write).
        auto load_gate = [&] {
            if (done > 0) mbar_wait(b.gate_empty, (done - 1) & 1);
            mbar_arrive_expect_tx(b.gate_full, kStagingBytes + kGateBytes);
            const int col = static_cast<int>(it.h * p.gate_head_stride);
            tma_load_2d(staging(smem), tg, col, it.q0, b.gate_full);
            tma_load_2d(gate_chunk1(smem), tg, col + kChunkCols, it.q0, b.gate_full);
        };
        mbar_arrive_expect_tx(b.q_full, kQBytes);
        for (int c = 0; c < kChunks; ++c) {
            tma_load_2d(smem + c * kBm * 128, tq, it.h * kD + c * kChunkCols, it.q0, b.q_full);
        }
        for (int t = 0; t < it.n_tiles; ++t, ++ring) {
            if (t == kGateAfterTiles) load_gate();
            const int s = ring % kStages;
            const uint32_t parity = ((ring / kStages) - 1) & 1;
            const int j0 = it.doc_begin + t * kBn;
            if (ring >= kStages) mbar_wait(&b.k_empty[s], parity);
            mbar_arrive_expect_tx(&b.k_full[s], kKvBytes);
            for (int c = 0; c < kChunks; ++c) {
                tma_load_2d(k_stage(smem, s) + c * kTileChunkBytes, tk, kvh * kD + c * kChunkCols,
                            j0, &b.k_full[s]);
            }
            if (ring >= kStages) mbar_wait(&b.v_empty[s], parity);
            mbar_arrive_expect_tx(&b.v_full[s], kKvBytes);
            for (int c = 0; c < kChunks; ++c) {
                tma_load_2d(v_stage(smem, s) + c * kTileChunkBytes, tv, kvh * kD + c * kChunkCols,
                            j0, &b.v_full[s]);
            }
        }
        if (it.n_tiles <= kGateAfterTiles) load_gate();
        w = atomicAdd(p.next_item, 1);
    }
}

// Where a consumer thread's rows lie within its item.
struct ConsumerRows {
    int cw, warp, lane, c;
    int row_lo, row_hi, warp_row0;
    int64_t row_stride;
};

// The item's last product, O += P_{nm-1} V_{nm-1} (`slot`: tile nm-1's ring position), with the
// loads of the gate chunks that the producer does not bring put in its shadow.
__device__ __forceinline__ void last_product(const Params& p, const Item& it, const Bars& b,
                                             unsigned char* smem, float (&acc)[128],
                                             uint32_t (&pa)[16], uint4 (&gate)[kChunks][4],
                                             const ConsumerRows& r, int slot) {
    const int cw = r.cw, lane = r.lane, warp_row0 = r.warp_row0;
    auto load_gate = [&](int ch) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = warp_row0 + lane / 8 + 4 * i;
            gate[ch][i] = row < it.q_end
                              ? __ldg(reinterpret_cast<const uint4*>(
                                    p.gate + row * p.gate_token_stride + it.h * p.gate_head_stride +
                                    ch * kChunkCols + 8 * (lane % 8)))
                              : make_uint4(0, 0, 0, 0);
        }
    };
    const int vs = slot % kStages;
    mbar_wait(&b.v_full[vs], (slot / kStages) & 1);
    turn_wait(cw);
    fence_regs(acc);
    fence_regs(pa);
    wgmma_fence();
    issue_pv(acc, pa, smem_addr(v_stage(smem, vs)));
    wgmma_commit();
    turn_pass(cw);
#pragma unroll
    for (int ch = kGateTmaChunks; ch < kChunks; ++ch) load_gate(ch);
    wgmma_wait<0>();
    fence_regs(acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&b.v_empty[vs]);
}

// The item's epilogue for one consumer warp: per 64-column chunk, the warp stages its 16 rows of
// bf16 O in its own 2 KiB of shared memory (4-byte stores, swizzled: conflict-free) and writes o
// (when asked for) and y = o * sigmoid(gate) as whole 128-byte rows; then the rows' lse.
__device__ __forceinline__ void write_item_output(const Params& p, const Item& it, const Bars& b,
                                                  unsigned char* smem, const float (&acc)[128],
                                                  uint4 (&gate)[kChunks][4], const RowState& st,
                                                  const ConsumerRows& r, int done) {
    const int cw = r.cw, warp = r.warp, lane = r.lane, c = r.c;
    const int row_lo = r.row_lo, row_hi = r.row_hi, warp_row0 = r.warp_row0;
    const int64_t row_stride = r.row_stride;
    // Row sums were kept per thread (2 of every 8 columns): add the quad's.
    float l_lo = st.l_lo, l_hi = st.l_hi;
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    if (c == 0) {
        if (row_lo < it.q_end) {
            p.lse[static_cast<int64_t>(row_lo) * p.q_heads + it.h] = (st.m_lo + log2f(l_lo)) * kLn2;
        }
        if (row_hi < it.q_end) {
            p.lse[static_cast<int64_t>(row_hi) * p.q_heads + it.h] = (st.m_hi + log2f(l_hi)) * kLn2;
        }
    }
    const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
    unsigned char* buf = staging(smem) + (4 * cw + warp) * kWarpStagingBytes;
    const unsigned char* const gate1 = gate_chunk1(smem) + (4 * cw + warp) * kWarpStagingBytes;
    // The first gate chunk, from where the producer's TMA put it (the same swizzle as the
    // staging's), before O's first chunk is staged over it.
    mbar_wait(b.gate_full, done & 1);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int rr = lane / 8 + 4 * i, unit = lane % 8;
        gate[0][i] = *reinterpret_cast<const uint4*>(buf + rr * 128 + ((unit ^ (rr & 7)) * 16));
    }
    __syncwarp();
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch) {
        stage_bf16_chunk(buf, acc, ch, inv_lo, inv_hi, lane);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int rr = lane / 8 + 4 * i;  // row within the warp's 16
            const int unit = lane % 8;
            const int row = warp_row0 + rr;
            const uint4 raw =
                *reinterpret_cast<const uint4*>(buf + rr * 128 + ((unit ^ (rr & 7)) * 16));
            if (row < it.q_end) {
                const int64_t off = row * row_stride + it.h * kD + ch * kChunkCols + 8 * unit;
                if (p.o) *reinterpret_cast<uint4*>(p.o + off) = raw;
                float of[8], gf[8], yf[8];
                cuda::unpack8(cuda::Bf16x8{{raw.x, raw.y, raw.z, raw.w}}, of);
                const uint4 gr = ch == 1 ? *reinterpret_cast<const uint4*>(gate1 + rr * 128 +
                                                                           ((unit ^ (rr & 7)) * 16))
                                         : gate[ch][i];
                cuda::unpack8(cuda::Bf16x8{{gr.x, gr.y, gr.z, gr.w}}, gf);
#pragma unroll
                for (int e = 0; e < 8; e += 2) {
                    const float2 sg = sigmoid_pair(gf[e], gf[e + 1]);
                    yf[e] = of[e] * sg.x;
                    yf[e + 1] = of[e + 1] * sg.y;
                }
                cuda::store8(p.y + off, yf);
            }
        }
        __syncwarp();  // the buffer is rewritten by the next chunk
    }
    // The staging buffer is free for the next item's gate chunk (a TMA write: the staged
    // writes must be ordered before it).
    fence_proxy_async_smem();
}

// Consumer warpgroup `cw` (0 or 1): rows q0 + 64 cw .. + 64 of each item. Per key tile t:
// issue S_t and O += P_{t-1} V_{t-1} together, then the softmax of S_t runs while the product
// with V_{t-1} is still in flight (FlashAttention-3's intra-warpgroup overlap). Both warpgroups
// go through every key tile of the item (a tile past all of a warpgroup's rows is masked out
// whole) so that they take the same number of turns.
__device__ __forceinline__ void consume(const Params& p, unsigned char* smem, int cw) {
    const Bars b = bars_at(smem);
    const int tid = threadIdx.x & 127;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int c = lane & 3;
    const uint32_t q_base = smem_addr(smem) + 64 * cw * 128;
    if (cw == 1) turn_pass(cw);  // warpgroup 0 issues first
    int ring = 0;
    for (int done = 0;; ++done) {
        mbar_wait(b.q_full, done & 1);
        const Item it = *b.item;  // mbar_wait is a compiler memory barrier
        if (it.h < 0) return;
        const int r0 = it.q0 + 64 * cw;  // first row of this warpgroup
        const int row_lo = r0 + 16 * warp + g;
        const int row_hi = row_lo + 8;
        auto release = [&](uint64_t* bar) {
            __syncwarp();
            if (lane == 0) mbar_arrive(bar);
        };

        float acc[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        RowState st;
        float sc[32];
        uint32_t pa[16];
        const int n = it.n_tiles;
        // Key tiles this warpgroup computes: up to the one holding its last row (none when all
        // its rows are past the document). The tiles it skips are still waited for and
        // released, and their turns taken, so that the rings' phases and the two warpgroups'
        // turns stay in step: n + 1 turns per item each.
        const int wg_last = min(it.q_end, r0 + 64) - 1;
        const int nm = wg_last >= r0 ? (wg_last - it.doc_begin) / kBn + 1 : 0;
        auto skip_tiles = [&](int from) {
            for (int t = from; t < n; ++t) {
                const int slot = ring + t, s = slot % kStages;
                const uint32_t parity = (slot / kStages) & 1;
                mbar_wait(&b.k_full[s], parity);
                release(&b.k_empty[s]);
                mbar_wait(&b.v_full[s], parity);
                release(&b.v_empty[s]);
                turn_wait(cw);
                turn_pass(cw);
            }
        };
        if (nm == 0) {
            release(b.q_empty);
            turn_wait(cw);  // the turn of the last product
            turn_pass(cw);
            skip_tiles(0);
            ring += n;
            // After its turns: the other warpgroup is past the last epilogue.
            release(b.gate_empty);
            continue;
        }
        const bool diagonal0 = it.doc_begin + kBn - 1 > r0;
        // Tile 0: S_0 only.
        mbar_wait(&b.k_full[ring % kStages], (ring / kStages) & 1);
        turn_wait(cw);
        wgmma_fence();
        issue_scores(sc, q_base, smem_addr(k_stage(smem, ring % kStages)));
        wgmma_commit();
        turn_pass(cw);
        wgmma_wait<0>();
        fence_regs(sc);
        release(&b.k_empty[ring % kStages]);
        if (nm == 1) release(b.q_empty);  // this warpgroup's last use of Q
        softmax_tile(sc, st, it.doc_begin, diagonal0, row_lo, c, p.scale_log2);
        to_bf16_pairs(pa, sc);
        // Tiles 1 .. nm - 1: S_t with O += P_{t-1} V_{t-1}.
        for (int t = 1; t < nm; ++t) {
            const int slot = ring + t;  // ring position of tile t
            const int ks = slot % kStages, vs = (slot - 1) % kStages;
            mbar_wait(&b.k_full[ks], (slot / kStages) & 1);
            mbar_wait(&b.v_full[vs], ((slot - 1) / kStages) & 1);
            turn_wait(cw);
            fence_regs(acc);
            fence_regs(pa);
            wgmma_fence();
            issue_scores(sc, q_base, smem_addr(k_stage(smem, ks)));
            wgmma_commit();
            issue_pv(acc, pa, smem_addr(v_stage(smem, vs)));
            wgmma_commit();
            turn_pass(cw);
            wgmma_wait<1>();
            fence_regs(sc);
            release(&b.k_empty[ks]);
            if (t == nm - 1) release(b.q_empty);
            const int j0 = it.doc_begin + t * kBn;
            const float2 alpha =
                softmax_tile(sc, st, j0, j0 + kBn - 1 > r0, row_lo, c, p.scale_log2);
            wgmma_wait<0>();
            fence_regs(acc);
            release(&b.v_empty[vs]);
            // Once the rows' maxima settle, most tiles leave them unchanged (alpha = 1 exactly):
            // the warp then skips the 128 multiplications.
            if (!__all_sync(0xffffffffu, alpha.x == 1.0f && alpha.y == 1.0f)) {
#pragma unroll
                for (int i = 0; i < 128; ++i) acc[i] *= (i & 2) ? alpha.y : alpha.x;
            }
            to_bf16_pairs(pa, sc);
        }
        // The epilogue's gate chunks the producer does not bring: loaded while the last product
        // runs and the other warpgroup finishes the item (the scores' registers are free by then).
        const int64_t row_stride = static_cast<int64_t>(p.q_heads) * kD;
        const int warp_row0 = r0 + 16 * warp;
        const ConsumerRows rows{cw, warp, lane, c, row_lo, row_hi, warp_row0, row_stride};
        uint4 gate[kChunks][4];
        last_product(p, it, b, smem, acc, pa, gate, rows, ring + nm - 1);
        skip_tiles(nm);
        ring += n;

        write_item_output(p, it, b, smem, acc, gate, st, rows, done);
        release(b.gate_empty);
    }
}

// Persistent: one block per SM takes items off the longest-first list until none are left.
__global__ void __launch_bounds__(kThreads, 1)
    attention_forward_wgmma_kernel(const __grid_constant__ CUtensorMap tq,
                                   const __grid_constant__ CUtensorMap tk,
                                   const __grid_constant__ CUtensorMap tv,
                                   const __grid_constant__ CUtensorMap tg, const Params p) {
#if DT_HOPPER_CODE
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = align1024(smem_raw);
    if (threadIdx.x == 0) {
        prefetch_tensormap(&tq);
        prefetch_tensormap(&tk);
        prefetch_tensormap(&tv);
        prefetch_tensormap(&tg);
        const Bars b = bars_at(smem);
        mbar_init(b.q_full, 1);
        mbar_init(b.q_empty, kConsumerWarps);
        for (int i = 0; i < kStages; ++i) {
            mbar_init(&b.k_full[i], 1);
            mbar_init(&b.k_empty[i], kConsumerWarps);
            mbar_init(&b.v_full[i], 1);
            mbar_init(&b.v_empty[i], kConsumerWarps);
        }
        mbar_init(b.gate_full, 1);
        mbar_init(b.gate_empty, kConsumerWarps);
        mbar_fence_init();
    }
    __syncthreads();
    // Launched as a programmatic dependent: the list and its counter (zeroed by the listing or
    // by the previous forward on it) are read only once the grids before are done and visible.
    cuda::wait_for_prerequisite_grid();
    const int items = *p.tile_count * p.q_heads;
    const int wg = warpgroup_index();
    if (wg == 0) {
        regs_dec<kFwdProducerRegs>();
        if (threadIdx.x == 0) produce(p, &tq, &tk, &tv, &tg, smem, items);
    } else {
        regs_inc<kFwdConsumerRegs>();
        consume(p, smem, wg - 1);
    }
#else
    __trap();  // never launched without sm_90a code (DT_HOPPER_CODE)
#endif
}

}  // namespace

size_t gated_attention_forward_wgmma_workspace_bytes(const GatedAttentionArgs& a) {
    return tile_list_bytes(a, kBm);
}

namespace {

bool forward_schedule_fits(const GatedAttentionArgs& a, const void* schedule, size_t bytes) {
    // Items are counted in int32 by the blocks' atomic counter, which runs up to items + blocks.
    return bytes >= gated_attention_forward_wgmma_workspace_bytes(a) && cuda::aligned16(schedule) &&
           tile_list_capacity(a, kBm) * a.q_heads <= INT32_MAX - 65536 &&
           a.tokens <= INT32_MAX / 2 && a.q_heads * kD <= INT32_MAX;
}

}  // namespace

cudaError_t gated_attention_forward_wgmma_schedule(const GatedAttentionArgs& a, void* schedule,
                                                   size_t schedule_bytes, cudaStream_t stream) {
    if (!gated_attention_supported(a)) return cudaErrorInvalidValue;
    if (a.tokens == 0) return cudaSuccess;
    if (!forward_schedule_fits(a, schedule, schedule_bytes)) return cudaErrorInvalidValue;
    TileList list;
    return build_tile_list<kBm, false>(schedule, a, stream, &list);
}

cudaError_t gated_attention_forward_wgmma(bf16* y, bf16* o, float* lse, const GatedAttentionArgs& a,
                                          void* workspace, size_t workspace_bytes,
                                          cudaStream_t stream, int max_blocks) {
    if (cudaError_t e =
            gated_attention_forward_wgmma_schedule(a, workspace, workspace_bytes, stream);
        e != cudaSuccess) {
        return e;
    }
    return gated_attention_forward_wgmma_scheduled(y, o, lse, a, workspace, workspace_bytes, stream,
                                                   max_blocks);
}

cudaError_t gated_attention_forward_wgmma_scheduled(bf16* y, bf16* o, float* lse,
                                                    const GatedAttentionArgs& a, void* schedule,
                                                    size_t schedule_bytes, cudaStream_t stream,
                                                    int max_blocks) {
    if (!gated_attention_supported(a)) return cudaErrorInvalidValue;
    if (loaded_code().arch < kHopperCodeArch) return cudaErrorNoKernelImageForDevice;
    if (a.tokens == 0) return cudaSuccess;
    if (!forward_schedule_fits(a, schedule, schedule_bytes) || !cuda::aligned16(y) ||
        (o && !cuda::aligned16(o))) {
        return cudaErrorInvalidValue;
    }
    const TileList list = tile_list_at(schedule);

    CUtensorMap tq, tk, tv, tg;
    if (cudaError_t e = tensor_map_sw128(&tq, a.q, a.tokens, a.q_heads * kD, kBm); e != cudaSuccess)
        return e;
    if (cudaError_t e = tensor_map_sw128(&tk, a.k, a.tokens, a.kv_heads * kD, kBn);
        e != cudaSuccess)
        return e;
    if (cudaError_t e = tensor_map_sw128(&tv, a.v, a.tokens, a.kv_heads * kD, kBn);
        e != cudaSuccess)
        return e;
    // The gate as rows of gate_token_stride elements (q_proj's interleaved rows: its gate halves
    // are read, from a.gate on).
    if (cudaError_t e = tensor_map_sw128(&tg, a.gate, a.tokens, a.gate_token_stride, kBm);
        e != cudaSuccess)
        return e;
    Params p{list.tiles,
             list.count,
             list.next_item,
             list.finished,
             a.cu_seqlens,
             y,
             o,
             lse,
             a.gate,
             a.gate_token_stride,
             a.gate_head_stride,
             static_cast<int>(a.q_heads),
             static_cast<int>(a.q_heads / a.kv_heads),
             a.scale * kLog2e};
    if (cudaError_t e =
            cudaFuncSetAttribute(attention_forward_wgmma_kernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        e != cudaSuccess) {
        return e;
    }
    int device = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        e != cudaSuccess) {
        return e;
    }
    const int64_t blocks = std::min<int64_t>(max_blocks > 0 ? std::min(max_blocks, sms) : sms,
                                             tile_list_capacity(a, kBm) * a.q_heads);
    return cuda::launch_dependent(attention_forward_wgmma_kernel,
                                  dim3(static_cast<unsigned>(blocks)), dim3(kThreads), kSmemBytes,
                                  stream, tq, tk, tv, tg, p);
}

}  // namespace deltatune
