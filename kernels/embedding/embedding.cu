// Token embedding on the GPU: a row gather forward and a deterministic scatter-add backward
// (stable radix sort of (id, token), then each id's rows summed in token order, in pieces of at
// most kChunk rows). The GPU model sorts on the host (embedding_id_order) as it stages the batch;
// without a given order the sort of a micro-batch (up to kBlockSortTokens) runs in one block, in
// shared memory, in one launch where CUB's device-wide sort took five and twice the time.
#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/embedding/embedding.h"

namespace deltatune {

namespace {

constexpr int kThreads = 256;

size_t align_up(size_t n) {
    return (n + 255) / 256 * 256;
}

// kernels

__global__ void embedding_forward_kernel(__nv_bfloat16* __restrict__ out,
                                         const __nv_bfloat16* __restrict__ table,
                                         const int32_t* __restrict__ ids, int64_t hidden,
                                         bool vectorized) {
    const int64_t t = blockIdx.x;
    const __nv_bfloat16* src = table + static_cast<int64_t>(ids[t]) * hidden;
    __nv_bfloat16* dst = out + t * hidden;
    if (vectorized) {
        // kUnroll independent 16-byte loads in flight per thread before the first store.
        constexpr int kUnroll = 4;
        const int64_t nv = hidden / 8;
        const auto* s4 = reinterpret_cast<const uint4*>(src);
        auto* d4 = reinterpret_cast<uint4*>(dst);
        for (int64_t c = threadIdx.x; c < nv; c += kUnroll * blockDim.x) {
            uint4 tmp[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int64_t i = c + u * blockDim.x;
                if (i < nv) tmp[u] = s4[i];
            }
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int64_t i = c + u * blockDim.x;
                if (i < nv) d4[i] = tmp[u];
            }
        }
    } else {
        for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = src[c];
    }
}

// One-block stable sort of (id, token index) pairs by id's low `bits` bits; the token indices
// are made here (no iota pass). Slots past `tokens` hold the largest key and sort after every
// real token (stable: they come last in the input).
constexpr int kSortThreads = 1024;
// 4-bit digits (5 passes for a 248,320-token vocabulary): 5- and 6-bit ones measured the same.
template <int kItems, int kBits = 4>
using BlockSort = cub::BlockRadixSort<int32_t, kSortThreads, kItems, int32_t, kBits>;
constexpr int64_t kBlockSortTokens = int64_t{kSortThreads} * 16;

template <int kItems, int kBits>
__global__ void __launch_bounds__(kSortThreads)
    block_sort_kernel(int32_t* sorted_ids, int32_t* sorted_tokens, const int32_t* ids,
                      int64_t tokens, int bits) {
    extern __shared__ __align__(16) unsigned char sort_smem[];
    auto& temp = *reinterpret_cast<typename BlockSort<kItems, kBits>::TempStorage*>(sort_smem);
    int32_t keys[kItems], vals[kItems];
    const int32_t pad = static_cast<int32_t>((int64_t{1} << bits) - 1);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
        const int64_t t = static_cast<int64_t>(threadIdx.x) * kItems + i;  // blocked arrangement
        keys[i] = t < tokens ? ids[t] : pad;
        vals[i] = static_cast<int32_t>(t);
    }
    BlockSort<kItems, kBits>(temp).SortBlockedToStriped(keys, vals, 0, bits);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
        const int64_t t = static_cast<int64_t>(i) * kSortThreads + threadIdx.x;  // striped
        if (t < tokens) {
            sorted_ids[t] = keys[i];
            sorted_tokens[t] = vals[i];
        }
    }
}

template <int kItems, int kBits = 4>
cudaError_t block_sort(int32_t* sorted_ids, int32_t* sorted_tokens, const int32_t* ids,
                       int64_t tokens, int bits, cudaStream_t stream) {
    const int smem = static_cast<int>(sizeof(typename BlockSort<kItems, kBits>::TempStorage));
    if (cudaError_t e = cudaFuncSetAttribute(block_sort_kernel<kItems, kBits>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        e != cudaSuccess) {
        return e;
    }
    block_sort_kernel<kItems, kBits>
        <<<1, kSortThreads, smem, stream>>>(sorted_ids, sorted_tokens, ids, tokens, bits);
    return cudaGetLastError();
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) v[i] = static_cast<int32_t>(i);
}

// The backward sums each id's rows in pieces: a piece is the part of an id's run of sorted
// positions that lies in one aligned chunk of kChunk positions, so no piece has more than kChunk
// rows (a frequent token, several percent of real text, makes a run of hundreds). A piece that is
// its id's whole run is added straight into the table row; the others go to a slot of `pieces`
// (2 per chunk: the piece that continues the previous chunk's run, and the one that begins a run
// continuing into the next), and a second pass adds them to the row in order. The order is fixed
// by the sort, so the sums are bitwise reproducible.
//
// Both passes give a warp one chunk and one slice of kWarpCols * V columns: every warp reads at
// most kChunk rows (even work, unlike a block per piece, whose long pieces made the tail), its
// lanes' loads for kGroup positions in flight together. The pieces' pass is the sums'
// programmatic dependent (it is scheduled into the sums' tail and waits for their writes). Both
// beat a block per piece and the same kernels without the early launch; capping registers at 80
// for 6 blocks per SM spilled and was slower (docs/performance.md "Measured choices").
constexpr int64_t kChunk = 32;
constexpr int kGroup = 4;      // positions whose rows (and table rows) a warp loads at once
constexpr int kWarps = 4;      // per block, on consecutive column slices
constexpr int kWarpCols = 32;  // lanes per slice; a lane holds V columns

int64_t chunks(int64_t tokens) {
    return (tokens + kChunk - 1) / kChunk;
}

template <int V>
__device__ __forceinline__ void load_f32(const float* p, float (&f)[V]) {
    if constexpr (V == 8) {
        const float4 lo = reinterpret_cast<const float4*>(p)[0];
        const float4 hi = reinterpret_cast<const float4*>(p)[1];
        f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w;
        f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
    } else {
        f[0] = *p;
    }
}

template <int V>
__device__ __forceinline__ void store_f32(float* p, const float (&f)[V]) {
    if constexpr (V == 8) {
        reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
        reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
    } else {
        *p = f[0];
    }
}

// Warp (chunk = blockIdx.x, slice): sums each piece of the chunk's positions in token order
// (stable sort), seeded with the table row when the piece is its id's whole run.
template <int V>
__global__ void __launch_bounds__(kWarps * 32)
    embedding_backward_kernel(float* dtable, float* pieces, const __nv_bfloat16* dout,
                              const int32_t* sorted_ids, const int32_t* sorted_tokens,
                              int64_t tokens, int64_t hidden) {
    // The pieces' pass may be scheduled once every block of this grid has started (it waits
    // for this grid's writes before reading them): it fills the SMs this grid's tail leaves.
    cuda::allow_dependent_launch();
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int64_t c =
        (static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32) * (kWarpCols * V) + lane * V;
    const int64_t chunk = blockIdx.x, begin = chunk * kChunk;
    const int n = static_cast<int>(tokens - begin < kChunk ? tokens - begin : kChunk);
    if (c - lane * V >= hidden) return;  // a slice past the row (the last block's spare warps)
    const bool in_row = c < hidden;
    // Lane i holds position begin + i; the neighbours outside the chunk decide whether its
    // first and last pieces continue a run.
    const int32_t id = lane < n ? sorted_ids[begin + lane] : -1;
    const int32_t token = lane < n ? sorted_tokens[begin + lane] : 0;
    const int32_t before = begin > 0 ? sorted_ids[begin - 1] : -1;
    const int32_t after = begin + n < tokens ? sorted_ids[begin + n] : -1;
    // Every lane joins every shuffle (a full-mask shuffle some lane skips never completes).
    const int32_t up = __shfl_up_sync(0xffffffffu, id, 1);
    const int32_t next = __shfl_down_sync(0xffffffffu, id, 1);
    const int32_t prev = lane == 0 ? before : up;
    const unsigned starts = __ballot_sync(0xffffffffu, lane < n && (lane == 0 || id != prev));
    const unsigned ends = __ballot_sync(0xffffffffu, lane < n && (lane == n - 1 || id != next));
    const int32_t first_id = __shfl_sync(0xffffffffu, id, 0);
    const int32_t last_id = __shfl_sync(0xffffffffu, id, n - 1);
    const bool from_prev = before == first_id;  // the first piece continues a run
    const int last_start = 31 - __clz(starts);
    const bool into_next = after == last_id;  // the last piece continues into the next
    // Pieces that are their id's whole run: every start but a continued first or continuing last.
    const unsigned whole = starts & ~(from_prev ? 1u : 0u) & ~(into_next ? 1u << last_start : 0u);
    float acc[V] = {};
    for (int j0 = 0; j0 < n; j0 += kGroup) {
        float v[kGroup][V], seed[kGroup][V];
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
            const int j = j0 + g;
            const int32_t t = __shfl_sync(0xffffffffu, token, j & 31);
            const int32_t row = __shfl_sync(0xffffffffu, id, j & 31);
            if (j < n && in_row) {
                cuda::load_vec<V>(dout + static_cast<int64_t>(t) * hidden + c, v[g]);
                if (whole >> j & 1u)
                    load_f32<V>(dtable + static_cast<int64_t>(row) * hidden + c, seed[g]);
            }
        }
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
            const int j = j0 + g;
            if (j >= n) break;
            if (starts >> j & 1u) {
#pragma unroll
                for (int i = 0; i < V; ++i) acc[i] = (whole >> j & 1u) ? seed[g][i] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < V; ++i) acc[i] += v[g][i];
            const int32_t row = __shfl_sync(0xffffffffu, id, j);
            if ((ends >> j & 1u) && in_row) {
                const int start = 31 - __clz(starts & ((2u << j) - 1));  // 2u << 31 wraps to 0
                // Slot 0: the piece continuing the previous chunk's run (the pieces' pass reads
                // it as a later chunk's first piece); slot 1: the one beginning a run.
                const int64_t slot = 2 * chunk + (start == 0 && from_prev ? 0 : 1);
                float* out = (whole >> start & 1u) ? dtable + static_cast<int64_t>(row) * hidden
                                                   : pieces + slot * hidden;
                store_f32<V>(out + c, acc);
            }
        }
    }
}

// Warp (chunk = blockIdx.x, slice) acts if the chunk's last piece begins a run that continues
// into later chunks: it adds that piece, then each later chunk's first piece while the run
// lasts, to the table row, in order.
template <int V>
__global__ void __launch_bounds__(kWarps * 32)
    embedding_pieces_kernel(float* dtable, const float* pieces, const int32_t* sorted_ids,
                            int64_t tokens, int64_t hidden) {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int64_t c =
        (static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32) * (kWarpCols * V) + lane * V;
    const int64_t chunk = blockIdx.x;
    const int64_t begin = chunk * kChunk;
    const int64_t next = begin + kChunk;  // the next chunk's first position
    // Launched as the sums' programmatic dependent: every thread waits for that grid (so work
    // after this kernel follows both), the checks on sorted_ids (inputs) done first.
    auto wait_for_sums = [] { cuda::wait_for_prerequisite_grid(); };
    const bool slice = c - lane * V < hidden;
    const int32_t id = next < tokens ? sorted_ids[next - 1] : -1;
    // Acts if the last piece begins a run that continues: the next chunk starts with its id,
    // and this chunk does not continue an earlier run (sorted: equal at begin - 1 and next - 1).
    if (!slice || next >= tokens || sorted_ids[next] != id ||
        (begin > 0 && sorted_ids[begin - 1] == id)) {
        wait_for_sums();
        return;
    }
    // The later chunks the run reaches: those whose first position holds id, a prefix of the
    // chunks after this one (sorted), counted 32 at a time.
    int64_t later = 0;
    for (;;) {
        const int64_t k = chunk + 1 + later + lane;
        const unsigned hit =
            __ballot_sync(0xffffffffu, k * kChunk < tokens && sorted_ids[k * kChunk] == id);
        later += __popc(hit);
        if (hit != 0xffffffffu) break;
    }
    wait_for_sums();
    if (c >= hidden) return;
    float* row = dtable + static_cast<int64_t>(id) * hidden + c;
    float acc[V], v[V];
    load_f32<V>(row, acc);
    load_f32<V>(pieces + (2 * chunk + 1) * hidden + c, v);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] += v[i];
    for (int64_t k0 = chunk + 1; k0 <= chunk + later; k0 += kGroup) {
        float w[kGroup][V];
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
            if (k0 + g <= chunk + later) load_f32<V>(pieces + 2 * (k0 + g) * hidden + c, w[g]);
        }
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
            if (k0 + g <= chunk + later) {
#pragma unroll
                for (int i = 0; i < V; ++i) acc[i] += w[g][i];
            }
        }
    }
    store_f32<V>(row, acc);
}

int id_bits(int64_t vocab) {
    int bits = 1;
    while (bits < 31 && (int64_t{1} << bits) < vocab) ++bits;
    return bits;
}

size_t sort_temp_bytes(int64_t tokens) {
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                    static_cast<int32_t*>(nullptr),
                                    static_cast<const int32_t*>(nullptr),
                                    static_cast<int32_t*>(nullptr), static_cast<int>(tokens));
    return bytes;
}

}  // namespace

// launchers

cudaError_t embedding_forward(__nv_bfloat16* out, const __nv_bfloat16* table, const int32_t* ids,
                              int64_t tokens, int64_t hidden, cudaStream_t stream) {
    if (tokens == 0 || hidden == 0) return cudaSuccess;
    const bool vectorized = hidden % 8 == 0 && cuda::aligned16(out) && cuda::aligned16(table);
    const int threads = cuda::row_threads(vectorized ? hidden / 8 : hidden);
    embedding_forward_kernel<<<static_cast<unsigned>(tokens), threads, 0, stream>>>(
        out, table, ids, hidden, vectorized);
    return cudaGetLastError();
}

size_t embedding_backward_sorted_workspace_bytes(int64_t tokens, int64_t hidden) {
    return sizeof(float) * static_cast<size_t>(2 * chunks(tokens) * hidden);
}

size_t embedding_backward_workspace_bytes(int64_t tokens, int64_t hidden) {
    return 3 * align_up(sizeof(int32_t) * static_cast<size_t>(tokens)) +
           align_up(sort_temp_bytes(tokens)) +
           embedding_backward_sorted_workspace_bytes(tokens, hidden);
}

cudaError_t embedding_backward_sorted(float* dtable, const __nv_bfloat16* dout,
                                      const int32_t* sorted_ids, const int32_t* sorted_tokens,
                                      int64_t tokens, int64_t hidden, void* workspace,
                                      size_t workspace_bytes, cudaStream_t stream) {
    if (tokens == 0 || hidden == 0) return cudaSuccess;
    if (workspace_bytes < embedding_backward_sorted_workspace_bytes(tokens, hidden)) {
        return cudaErrorInvalidValue;
    }
    auto* pieces = static_cast<float*>(workspace);
    const bool vec = hidden % 8 == 0 && cuda::aligned16(dout) && cuda::aligned16(dtable) &&
                     cuda::aligned16(workspace);
    const int64_t slice = kWarpCols * (vec ? 8 : 1);
    const dim3 grid(static_cast<unsigned>(chunks(tokens)),
                    static_cast<unsigned>((hidden + slice * kWarps - 1) / (slice * kWarps)));
    if (grid.y > 65535) return cudaErrorInvalidValue;  // rows past 2M (8M) columns
    auto* sum_pieces = vec ? embedding_backward_kernel<8> : embedding_backward_kernel<1>;
    sum_pieces<<<grid, kWarps * 32, 0, stream>>>(dtable, pieces, dout, sorted_ids, sorted_tokens,
                                                 tokens, hidden);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    auto* add_pieces = vec ? embedding_pieces_kernel<8> : embedding_pieces_kernel<1>;
    return cuda::launch_dependent(add_pieces, grid, dim3(kWarps * 32), 0, stream, dtable,
                                  static_cast<const float*>(pieces),
                                  static_cast<const int32_t*>(sorted_ids), tokens, hidden);
}

cudaError_t embedding_backward(float* dtable, const __nv_bfloat16* dout, const int32_t* ids,
                               int64_t tokens, int64_t hidden, int64_t vocab, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
    if (tokens == 0 || hidden == 0) return cudaSuccess;
    if (workspace_bytes < embedding_backward_workspace_bytes(tokens, hidden)) {
        return cudaErrorInvalidValue;
    }
    const size_t ids_bytes = align_up(sizeof(int32_t) * static_cast<size_t>(tokens));
    char* ws = static_cast<char*>(workspace);
    auto* sorted_ids = reinterpret_cast<int32_t*>(ws);
    auto* token_index = reinterpret_cast<int32_t*>(ws + ids_bytes);
    auto* sorted_tokens = reinterpret_cast<int32_t*>(ws + 2 * ids_bytes);
    char* pieces = ws + 3 * ids_bytes + align_up(sort_temp_bytes(tokens));
    const int bits = id_bits(vocab);
    cudaError_t sorted = cudaSuccess;
    if (tokens <= kBlockSortTokens / 2) {
        sorted = block_sort<kBlockSortTokens / kSortThreads / 2>(sorted_ids, sorted_tokens, ids,
                                                                 tokens, bits, stream);
    } else if (tokens <= kBlockSortTokens) {
        sorted = block_sort<kBlockSortTokens / kSortThreads>(sorted_ids, sorted_tokens, ids, tokens,
                                                             bits, stream);
    } else {
        void* temp = ws + 3 * ids_bytes;
        size_t temp_bytes = sort_temp_bytes(tokens);
        iota_kernel<<<static_cast<unsigned>((tokens + kThreads - 1) / kThreads), kThreads, 0,
                      stream>>>(token_index, tokens);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
        sorted = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, sorted_ids, token_index,
                                                 sorted_tokens, static_cast<int>(tokens), 0, bits,
                                                 stream);
    }
    if (sorted != cudaSuccess) return sorted;
    return embedding_backward_sorted(
        dtable, dout, sorted_ids, sorted_tokens, tokens, hidden, pieces,
        embedding_backward_sorted_workspace_bytes(tokens, hidden), stream);
}

}  // namespace deltatune
