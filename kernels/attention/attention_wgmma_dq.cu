// dQ = scale * dS K from the dS^T tiles the wgmma backward left in memory (see
// attention_wgmma_dq.h).
//
// One block of 3 warpgroups per (64-row query tile t of a document, two query heads of one kv
// group), listed with the most key tiles first. Warpgroup 0, thread 0 is the producer: per key
// tile k = 0 .. t, the K tile (TMA, 4 chunks of 64 columns) and the two heads' dS^T tiles (1-D
// bulk copies of 8 KiB, already swizzled) into a three-stage ring. Warpgroups 1 and 2 each own
// one head: dQ (64 x 256 fp32, 128 registers per thread) += dS K as 4 wgmma m64n256k16 with A =
// dS^T read transposed and B = K read N-major, the next tile's loads in flight meanwhile. The
// two heads share each K tile (a block per head read K twice as often). Each query row's dQ is
// one block's sum over the key tiles in order: no atomics, the same bits every run.
#include "kernels/attention/attention_wgmma_dq.h"

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cstddef>

#include "kernels/attention/attention_wgmma_tile.cuh"
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/hopper.cuh"

namespace deltatune {

namespace {

using bf16 = __nv_bfloat16;
using namespace hopper;
using namespace wgmma_attention;

constexpr int kTile = kBn;
constexpr int kKBytes = kKvBytes;  // a K tile
constexpr int kChunkBytes = kTileChunkBytes;
constexpr int kDsBytes = kDsTileBytes;  // a dS^T tile
constexpr int kRing = 3;
constexpr int kStageBytes = kKBytes + 2 * kDsBytes;
// The epilogue's: each consumer warp's 16 rows of bf16 dQ (16 x 512 bytes), so that they leave
// as whole 512-byte rows (16 bytes a lane) instead of 4-byte pieces of 8 rows at a time.
constexpr int kDqWarpStagingBytes = 16 * kD * 2;
// Shared memory, from its 1024-byte-aligned base: the layout is this struct, addressed through
// offsets taken from it, and the launch's size is its size plus the alignment slack.
struct DqSmem {
    struct Stage {
        unsigned char k[kKBytes];
        unsigned char ds[2][kDsBytes];  // the two heads' dS^T tiles
    } ring[kRing];
    unsigned char staging[kConsumerWarps][kDqWarpStagingBytes];
    uint64_t bars[8];  // full[kRing], then empty[kRing]; room to spare
};
static_assert(sizeof(DqSmem::Stage) == kStageBytes && 2 * kRing <= 8);
constexpr int kOffStaging = offsetof(DqSmem, staging);
constexpr int kOffBars = offsetof(DqSmem, bars);
constexpr int kSmemBytes = 1024 + static_cast<int>(sizeof(DqSmem));  // + alignment
// TMA boxes and wgmma operands in the 128-byte swizzle start on 1024-byte boundaries.
static_assert(kStageBytes % 1024 == 0 && kKBytes % 1024 == 0 && kDsBytes % 1024 == 0,
              "swizzled tiles must be 1024-byte aligned");
static_assert(kOffStaging % 16 == 0 && kOffBars % 8 == 0, "bulk copies and mbarriers");

struct Params {
    const int2* tiles;  // (document, query tile), most key tiles first
    const int* tile_count;
    const int32_t* cu;
    const int64_t* pair_base;
    const bf16* ds;
    bf16* dq;
    int q_heads, kv_heads, group, pairs;  // pairs: blocks per kv group (two heads each)
    float scale;
};

struct Block {
    int doc = 0, t = 0, doc_begin = 0, doc_end = 0, kvh = 0, h0 = 0, heads = 0;  // 0: no work
    // The document's first tile pair, read once: read per key tile, it held each stage's dS
    // loads behind a global load (the barrier waits between are memory clobbers).
    int64_t pair_base = 0;
    __device__ int64_t ds_at(const Params& p, int k, int w) const {
        return ds_tile_at(pair_base, t, k, p.q_heads, h0 + w);
    }
};

__device__ __forceinline__ Block block_of(const Params& p) {
    Block b;
    const int per_tile = p.kv_heads * p.pairs;
    const int idx = static_cast<int>(blockIdx.x) / per_tile;
    const int rem = static_cast<int>(blockIdx.x) % per_tile;
    if (idx >= *p.tile_count) return b;
    const int2 tile = p.tiles[idx];
    b.doc = tile.x;
    b.t = tile.y;
    b.doc_begin = p.cu[tile.x];
    b.doc_end = p.cu[tile.x + 1];
    b.kvh = rem / p.pairs;
    b.h0 = b.kvh * p.group + 2 * (rem % p.pairs);
    b.heads = min(2, p.group - 2 * (rem % p.pairs));
    b.pair_base = p.pair_base[tile.x];
    return b;
}

__device__ __forceinline__ uint64_t* bars_at(unsigned char* smem) {
    return reinterpret_cast<uint64_t*>(smem + kOffBars);  // full[kRing], then empty[kRing]
}

__device__ __forceinline__ void produce(const Params& p, const Block& b, const CUtensorMap* tk,
                                        unsigned char* smem) {
    uint64_t* full = bars_at(smem);
    uint64_t* empty = full + kRing;
    for (int k = 0; k <= b.t; ++k) {
        const int s = k % kRing;
        if (k >= kRing) mbar_wait(&empty[s], ((k / kRing) - 1) & 1);
        unsigned char* stage = smem + s * kStageBytes;
        mbar_arrive_expect_tx(&full[s], kKBytes + b.heads * kDsBytes);
        for (int c = 0; c < kChunks; ++c) {
            tma_load_2d(stage + c * kChunkBytes, tk, b.kvh * kD + c * kChunkCols,
                        b.doc_begin + k * kTile, &full[s]);
        }
        for (int w = 0; w < b.heads; ++w) {
            bulk_load(stage + kKBytes + w * kDsBytes, p.ds + b.ds_at(p, k, w), kDsBytes, &full[s]);
        }
    }
}

__device__ __forceinline__ void consume(const Params& p, const Block& b, unsigned char* smem,
                                        int w) {
    const int tid = threadIdx.x & 127;
    const int warp = tid >> 5, lane = tid & 31;
    uint64_t* full = bars_at(smem);
    uint64_t* empty = full + kRing;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    for (int k = 0; k <= b.t; ++k) {
        const int s = k % kRing;
        mbar_wait(&full[s], (k / kRing) & 1);
        const uint32_t k_base = smem_addr(smem + s * kStageBytes);
        const uint32_t ds_base = k_base + kKBytes + w * kDsBytes;
        wgmma_fence();
        const uint64_t ds_desc = sw128_desc(ds_base, kChunkBytes, 1024);
        const uint64_t k_desc = sw128_desc(k_base, kChunkBytes, 1024);
#pragma unroll
        for (int kk = 0; kk < kTile / 16; ++kk) {
            wgmma_m64n256k16_ss_ta_tb(acc, desc_at(ds_desc, kk * 2048), desc_at(k_desc, kk * 2048),
                                      1);
        }
        wgmma_commit();
        wgmma_wait<1>();  // the previous key tile's products are done: its stage is free
        if (k > 0) {
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[(k - 1) % kRing]);
        }
    }
    wgmma_wait<0>();
    fence_regs(acc);
    // The warp's 16 rows staged as 512-byte rows, 4 chunks side by side (stage_bf16_chunk: unit
    // j of a row at (j ^ row % 8) * 16), then read back a row per instruction, lane l its unit l.
    unsigned char* buf = smem + kOffStaging + (4 * w + warp) * kDqWarpStagingBytes;
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch) {
        stage_bf16_chunk<kD * 2>(buf + ch * 128, acc, ch, p.scale, p.scale, lane);
    }
    __syncwarp();
    const int h = b.h0 + w;
    const int row0 = b.doc_begin + b.t * kTile + 16 * warp;
#pragma unroll
    for (int rr = 0; rr < 16; ++rr) {
        const int row = row0 + rr;
        if (row < b.doc_end) {
            *reinterpret_cast<uint4*>(p.dq + (static_cast<int64_t>(row) * p.q_heads + h) * kD +
                                      8 * lane) =
                *reinterpret_cast<const uint4*>(buf + rr * 512 + (lane ^ (rr & 7)) * 16);
        }
    }
}

__global__ void __launch_bounds__(kThreads, 1)
    attention_ds_dq_kernel(const __grid_constant__ CUtensorMap tk, const Params p) {
#if DT_HOPPER_CODE
    const Block b = block_of(p);
    if (b.heads == 0) return;  // past the list's end
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = align1024(smem_raw);
    if (threadIdx.x == 0) {
        uint64_t* full = bars_at(smem);
        for (int i = 0; i < kRing; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&full[kRing + i], 4 * b.heads);  // empty: the consuming warps
        }
        mbar_fence_init();
    }
    __syncthreads();
    const int wg = warpgroup_index();
    if (wg == 0) {
        regs_dec<kProducerRegs>();
        if (threadIdx.x == 0) produce(p, b, &tk, smem);
    } else if (wg - 1 < b.heads) {
        regs_inc<kConsumerRegs>();
        consume(p, b, smem, wg - 1);
    }
#else
    __trap();  // never launched without sm_90a code (DT_HOPPER_CODE)
#endif
}

// pair_base[d] = the (query tile, key tile <= query tile) pairs of the documents before d: one
// block, each thread a run of documents, then a scan over the threads.
__global__ void __launch_bounds__(256)
    pair_base_kernel(int64_t* pair_base, const int32_t* cu, int num_docs) {
    using Scan = cub::BlockScan<int64_t, 256>;
    __shared__ typename Scan::TempStorage scan;
    const int per = (num_docs + 255) / 256;
    const int d0 = min(num_docs, static_cast<int>(threadIdx.x) * per);
    const int d1 = min(num_docs, d0 + per);
    auto pairs = [&](int d) {
        const int64_t n = (cu[d + 1] - cu[d] + kTile - 1) / kTile;
        return n * (n + 1) / 2;
    };
    int64_t sum = 0;
    for (int d = d0; d < d1; ++d) sum += pairs(d);
    int64_t run = 0;
    Scan(scan).ExclusiveSum(sum, run);
    for (int d = d0; d < d1; ++d) {
        pair_base[d] = run;
        run += pairs(d);
    }
}

}  // namespace

size_t attention_ds_tile_bytes(const GatedAttentionArgs& a) {
    return attention_ds_tile_bound(a.tokens, a.num_docs, a.max_doc_tokens, a.q_heads);
}

cudaError_t attention_ds_pair_base(int64_t* pair_base, const GatedAttentionArgs& a,
                                   cudaStream_t stream) {
    if (a.num_docs == 0) return cudaSuccess;
    pair_base_kernel<<<1, 256, 0, stream>>>(pair_base, a.cu_seqlens, static_cast<int>(a.num_docs));
    return cudaGetLastError();
}

static_assert(kTile == 64);  // the dQ list attention_backward_layout makes room for
size_t attention_ds_dq_workspace_bytes(const GatedAttentionArgs& a) {
    return tile_list_bytes(a, kTile);
}

cudaError_t attention_ds_dq(bf16* dq, const bf16* ds, const int64_t* pair_base,
                            const GatedAttentionArgs& a, void* workspace, cudaStream_t stream) {
    TileList queries;
    if (cudaError_t e = build_tile_list<kTile, false>(workspace, a, stream, &queries);
        e != cudaSuccess) {
        return e;
    }
    CUtensorMap tk;
    if (cudaError_t e = tensor_map_sw128(&tk, a.k, a.tokens, a.kv_heads * kD, kTile);
        e != cudaSuccess) {
        return e;
    }
    const int group = static_cast<int>(a.q_heads / a.kv_heads);
    const Params p{queries.tiles,
                   queries.count,
                   a.cu_seqlens,
                   pair_base,
                   ds,
                   dq,
                   static_cast<int>(a.q_heads),
                   static_cast<int>(a.kv_heads),
                   group,
                   (group + 1) / 2,
                   a.scale};
    if (cudaError_t e = cudaFuncSetAttribute(
            attention_ds_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        e != cudaSuccess) {
        return e;
    }
    const auto blocks = static_cast<unsigned>(tile_list_capacity(a, kTile) * a.kv_heads * p.pairs);
    attention_ds_dq_kernel<<<blocks, kThreads, kSmemBytes, stream>>>(tk, p);
    return cudaGetLastError();
}

}  // namespace deltatune
