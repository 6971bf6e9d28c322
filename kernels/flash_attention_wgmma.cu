// Gated varlen causal GQA attention forward on wgmma + TMA (see flash_attention_wgmma.h).
//
// Block = 3 warpgroups for one (query tile of 128 rows, query head):
//   warpgroup 0, thread 0: the producer. Loads the Q tile once, then K and V tiles of 64 keys
//     into a two-stage ring: it waits for a stage's "empty" barrier (all 8 consumer warps done
//     with it), and TMA completes the stage's "full" barrier with the bytes it expects.
//   warpgroups 1, 2: consumers, 64 query rows each. Per key tile: S = Q K^T (16 wgmma
//     m64n64k16, both from shared memory), causal mask on the diagonal tiles, online softmax in
//     registers (exp2 of scores pre-scaled by scale * log2 e), O += P V (4 wgmma m64n256k16 with
//     P from registers: the accumulator layout of S is the A-operand layout, FlashAttention-2's
//     trick), then the stage is released. The accumulator O is 128 fp32 registers per thread,
//     hence setmaxnreg: consumers 240, the producer 24.
// Epilogue: O / l rounded to bf16 is staged in the warpgroup's own (now unused) part of the Q
// tile, then written with 16-byte accesses as o and as y = o * sigmoid(gate); lse per row.
// Keys before the document's start are never loaded (the key range starts there); keys after a
// row are masked; rows past the document are computed on whatever follows and not stored.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/hopper.cuh"
#include "kernels/flash_attention_wgmma.h"

namespace deltatune {

namespace {

using bf16 = __nv_bfloat16;
using namespace hopper;

constexpr int kD = 256;                    // head_dim
constexpr int kBm = 128;                   // query rows per block (2 consumer warpgroups)
constexpr int kBn = 64;                    // keys per tile
constexpr int kChunkCols = 64;             // columns per 128-byte swizzled chunk
constexpr int kChunks = kD / kChunkCols;   // 4
constexpr int kQBytes = kBm * kD * 2;      // 64 KiB
constexpr int kKvBytes = kBn * kD * 2;     // 32 KiB (K or V tile)
constexpr int kStageBytes = 2 * kKvBytes;  // K then V
constexpr int kStages = 2;
constexpr int kThreads = 384;
constexpr int kConsumerWarps = 8;
constexpr int kSmemBytes = 1024 + kQBytes + kStages * kStageBytes + 64;  // + alignment, barriers
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Params {
    const int2* tiles;  // (document, query tile) longest-first
    const int* tile_count;
    const int32_t* cu;
    bf16* y;
    bf16* o;
    float* lse;
    const bf16* gate;
    int64_t gate_token_stride, gate_head_stride;
    int q_heads, group;
    float scale_log2;
};

// One block lists every (document, query tile) pair by descending tile index (the number of
// key tiles grows with it): counts per index, offsets from the highest index down, then each
// document places its tiles. The order inside one index depends on atomics, which changes the
// schedule only, never a result.
__global__ void list_tiles_kernel(int2* tiles, int* count, int* per_level, int* offsets,
                                  const int32_t* cu, int num_docs, int levels) {
    for (int i = threadIdx.x; i < levels; i += blockDim.x) per_level[i] = 0;
    __syncthreads();
    for (int d = threadIdx.x; d < num_docs; d += blockDim.x) {
        const int n = (cu[d + 1] - cu[d] + kBm - 1) / kBm;
        for (int m = 0; m < n; ++m) atomicAdd(&per_level[m], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int m = levels - 1; m >= 0; --m) {
            offsets[m] = run;
            run += per_level[m];
            per_level[m] = 0;
        }
        *count = run;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < num_docs; d += blockDim.x) {
        const int n = (cu[d + 1] - cu[d] + kBm - 1) / kBm;
        for (int m = 0; m < n; ++m)
            tiles[offsets[m] + atomicAdd(&per_level[m], 1)] = make_int2(d, m);
    }
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// The consumer warpgroup `cw` (0 or 1): rows q0 + 64 cw .. + 64 of the tile.
__device__ __forceinline__ void consume(const Params& p, unsigned char* smem, uint64_t* bars,
                                        int cw, int h, int doc_begin, int q0, int q_end,
                                        int n_tiles) {
    uint64_t* q_full = bars;
    uint64_t* full = bars + 1;
    uint64_t* empty = bars + 1 + kStages;
    const int tid = threadIdx.x & 127;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int c = lane & 3;
    const int r0 = q0 + 64 * cw;  // first row of this warpgroup
    const int row_lo = r0 + 16 * warp + g;
    const int row_hi = row_lo + 8;
    const int wg_last = min(q_end, r0 + 64) - 1;
    // Key tiles this warpgroup needs (the later ones are wholly after its rows).
    const int needed = wg_last >= r0 ? (wg_last - doc_begin) / kBn + 1 : 0;
    const uint32_t q_base = smem_addr(smem) + 64 * cw * 128;

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;
    mbar_wait(q_full, 0);

    for (int t = 0; t < n_tiles; ++t) {
        const int s = t % kStages;
        mbar_wait(&full[s], (t / kStages) & 1);
        if (t < needed) {
            const uint32_t k_base = smem_addr(smem) + kQBytes + s * kStageBytes;
            const uint32_t v_base = k_base + kKvBytes;
            float sc[32];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kD / 16; ++kk) {
                const uint32_t chunk = kk / 4, within = (kk % 4) * 32;
                wgmma_m64n64k16_ss(sc, sw128_desc(q_base + chunk * kBm * 128 + within, 16, 1024),
                                   sw128_desc(k_base + chunk * kBn * 128 + within, 16, 1024),
                                   kk > 0);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(sc);
            const int j0 = doc_begin + t * kBn;
            const bool diagonal = j0 + kBn - 1 > r0;
            float tmax_lo = -INFINITY, tmax_hi = -INFINITY;
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                const int key = j0 + 8 * (i / 4) + 2 * c + (i & 1);
                const int row = (i & 2) ? row_hi : row_lo;
                const float v = (diagonal && key > row) ? -INFINITY : sc[i] * p.scale_log2;
                sc[i] = v;
                if (i & 2) {
                    tmax_hi = fmaxf(tmax_hi, v);
                } else {
                    tmax_lo = fmaxf(tmax_lo, v);
                }
            }
            tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, 1));
            tmax_lo = fmaxf(tmax_lo, __shfl_xor_sync(0xffffffffu, tmax_lo, 2));
            tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, 1));
            tmax_hi = fmaxf(tmax_hi, __shfl_xor_sync(0xffffffffu, tmax_hi, 2));
            const float mn_lo = fmaxf(m_lo, tmax_lo), mn_hi = fmaxf(m_hi, tmax_hi);
            // A row's first tile always holds its document's first key, so mn is finite; the
            // guard keeps exp2 away from -inf - -inf all the same.
            const float base_lo = mn_lo == -INFINITY ? 0.0f : mn_lo;
            const float base_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
            const float alpha_lo = exp2f(m_lo - base_lo), alpha_hi = exp2f(m_hi - base_hi);
            m_lo = mn_lo;
            m_hi = mn_hi;
            float sum_lo = 0.0f, sum_hi = 0.0f;
            uint32_t pa[16];
#pragma unroll
            for (int i = 0; i < 32; i += 2) {
                const float base = (i & 2) ? base_hi : base_lo;
                const float e0 = exp2f(sc[i] - base), e1 = exp2f(sc[i + 1] - base);
                if (i & 2) {
                    sum_hi += e0 + e1;
                } else {
                    sum_lo += e0 + e1;
                }
                pa[i / 2] = pack_bf16(e0, e1);
            }
            l_lo = l_lo * alpha_lo + sum_lo;
            l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] *= (i & 2) ? alpha_hi : alpha_lo;
            fence_regs(acc);
            fence_regs(pa);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kBn / 16; ++kk) {
                const uint32_t a[4] = {pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]};
                wgmma_m64n256k16_rs_tb(acc, a, sw128_desc(v_base + kk * 16 * 128, kBn * 128, 1024));
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(acc);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
    }

    // Epilogue. Row sums were kept per thread (its 2 columns of every 8): add the quad's.
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    const float inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f;
    const float inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
    // Stage bf16 O in this warpgroup's rows of the Q tile, same swizzle (conflict-free stores).
    unsigned char* stage = smem + 64 * cw * 128;
    const int lr = 16 * warp + g;  // local row of row_lo; row_hi is lr + 8 (same row % 8)
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        unsigned char* chunk = stage + (j / 8) * kBm * 128;
        const int unit = ((j % 8) ^ (lr & 7)) * 16 + 4 * c;
        *reinterpret_cast<uint32_t*>(chunk + lr * 128 + unit) =
            pack_bf16(acc[4 * j] * inv_lo, acc[4 * j + 1] * inv_lo);
        *reinterpret_cast<uint32_t*>(chunk + (lr + 8) * 128 + unit) =
            pack_bf16(acc[4 * j + 2] * inv_hi, acc[4 * j + 3] * inv_hi);
    }
    if (c == 0) {
        if (row_lo < q_end) {
            p.lse[static_cast<int64_t>(row_lo) * p.q_heads + h] = (m_lo + log2f(l_lo)) * kLn2;
        }
        if (row_hi < q_end) {
            p.lse[static_cast<int64_t>(row_hi) * p.q_heads + h] = (m_hi + log2f(l_hi)) * kLn2;
        }
    }
    named_barrier(1 + cw, 128);
    const int64_t row_stride = static_cast<int64_t>(p.q_heads) * kD;
#pragma unroll 4
    for (int k = tid; k < 64 * 32; k += 128) {
        const int lrow = k / 32, u = k % 32;
        const int row = r0 + lrow;
        if (row >= q_end) continue;
        const unsigned char* src =
            stage + (u / 8) * kBm * 128 + lrow * 128 + (((u % 8) ^ (lrow & 7)) * 16);
        const uint4 raw = *reinterpret_cast<const uint4*>(src);
        const int64_t off = row * row_stride + h * kD + u * 8;
        *reinterpret_cast<uint4*>(p.o + off) = raw;
        float of[8], gf[8], yf[8];
        cuda::unpack8(cuda::Bf16x8{{raw.x, raw.y, raw.z, raw.w}}, of);
        cuda::load8(p.gate + row * p.gate_token_stride + h * p.gate_head_stride + u * 8, gf);
#pragma unroll
        for (int e = 0; e < 8; ++e) yf[e] = of[e] / (1.0f + expf(-gf[e]));
        cuda::store8(p.y + off, yf);
    }
}

__global__ void __launch_bounds__(kThreads, 1)
    attention_forward_wgmma_kernel(const __grid_constant__ CUtensorMap tq,
                                   const __grid_constant__ CUtensorMap tk,
                                   const __grid_constant__ CUtensorMap tv, const Params p) {
    if (static_cast<int>(blockIdx.y) >= *p.tile_count) return;  // the whole block
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kQBytes + kStages * kStageBytes);
    uint64_t* q_full = bars;
    uint64_t* full = bars + 1;
    uint64_t* empty = bars + 1 + kStages;

    const int2 tile = p.tiles[blockIdx.y];
    const int h = blockIdx.x;
    const int kvh = h / p.group;
    const int doc_begin = p.cu[tile.x];
    const int q0 = doc_begin + tile.y * kBm;
    const int q_end = min(p.cu[tile.x + 1], q0 + kBm);
    const int n_tiles = (q_end - doc_begin + kBn - 1) / kBn;

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], kConsumerWarps);
        }
        mbar_fence_init();
    }
    __syncthreads();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        regs_dec<24>();
        if (threadIdx.x != 0) return;
        mbar_arrive_expect_tx(q_full, kQBytes);
        for (int c = 0; c < kChunks; ++c) {
            tma_load_2d(smem + c * kBm * 128, &tq, h * kD + c * kChunkCols, q0, q_full);
        }
        for (int t = 0; t < n_tiles; ++t) {
            const int s = t % kStages;
            if (t >= kStages) mbar_wait(&empty[s], ((t / kStages) - 1) & 1);
            mbar_arrive_expect_tx(&full[s], kStageBytes);
            unsigned char* k_dst = smem + kQBytes + s * kStageBytes;
            const int j0 = doc_begin + t * kBn;
            for (int c = 0; c < kChunks; ++c) {
                tma_load_2d(k_dst + c * kBn * 128, &tk, kvh * kD + c * kChunkCols, j0, &full[s]);
                tma_load_2d(k_dst + kKvBytes + c * kBn * 128, &tv, kvh * kD + c * kChunkCols, j0,
                            &full[s]);
            }
        }
    } else {
        regs_inc<240>();
        consume(p, smem, bars, wg - 1, h, doc_begin, q0, q_end, n_tiles);
    }
}

// 2-D map over (rows = tokens, columns = heads * 256) bf16, boxes of 64 columns x box_rows,
// 128-byte swizzle.
cudaError_t make_map(CUtensorMap* map, const bf16* base, int64_t tokens, int64_t heads,
                     uint32_t box_rows) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                             cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            fn = nullptr;
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }();
    if (!encode) return cudaErrorNotSupported;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(heads * kD),
                                static_cast<cuuint64_t>(tokens)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(heads * kD * sizeof(bf16))};
    const cuuint32_t box[2] = {kChunkCols, box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult r =
        encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, strides,
               box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// Tiles: at most one partial tile per document beyond tokens / kBm full ones.
int64_t max_tiles(const GatedAttentionArgs& a) {
    return (a.tokens + kBm - 1) / kBm + a.num_docs;
}
int64_t levels(const GatedAttentionArgs& a) {
    return (a.tokens + kBm - 1) / kBm;
}

}  // namespace

size_t gated_attention_forward_wgmma_workspace_bytes(const GatedAttentionArgs& a) {
    return 16 + 8 * static_cast<size_t>(max_tiles(a)) + 8 * static_cast<size_t>(levels(a));
}

cudaError_t gated_attention_forward_wgmma(bf16* y, bf16* o, float* lse, const GatedAttentionArgs& a,
                                          void* workspace, size_t workspace_bytes,
                                          cudaStream_t stream) {
    if (!gated_attention_supported(a)) return cudaErrorInvalidValue;
    if (a.tokens == 0) return cudaSuccess;
    if (workspace_bytes < gated_attention_forward_wgmma_workspace_bytes(a) ||
        max_tiles(a) > 65535 || a.tokens > INT32_MAX / 2 || a.q_heads * kD > INT32_MAX) {
        return cudaErrorInvalidValue;
    }
    auto* ws = static_cast<unsigned char*>(workspace);
    int* count = reinterpret_cast<int*>(ws);
    int2* tiles = reinterpret_cast<int2*>(ws + 16);
    int* per_level = reinterpret_cast<int*>(ws + 16 + 8 * max_tiles(a));
    int* offsets = per_level + levels(a);
    list_tiles_kernel<<<1, 1024, 0, stream>>>(tiles, count, per_level, offsets, a.cu_seqlens,
                                              static_cast<int>(a.num_docs),
                                              static_cast<int>(levels(a)));
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;

    CUtensorMap tq, tk, tv;
    if (cudaError_t e = make_map(&tq, a.q, a.tokens, a.q_heads, kBm); e != cudaSuccess) return e;
    if (cudaError_t e = make_map(&tk, a.k, a.tokens, a.kv_heads, kBn); e != cudaSuccess) return e;
    if (cudaError_t e = make_map(&tv, a.v, a.tokens, a.kv_heads, kBn); e != cudaSuccess) return e;
    Params p{tiles,
             count,
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
    const dim3 grid(static_cast<unsigned>(a.q_heads), static_cast<unsigned>(max_tiles(a)));
    attention_forward_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(tq, tk, tv, p);
    return cudaGetLastError();
}

}  // namespace deltatune
