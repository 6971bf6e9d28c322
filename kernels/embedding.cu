// Token embedding on the GPU: a row gather forward and a deterministic scatter-add backward
// (stable radix sort of (id, token), then each id's rows summed in token order, in pieces of at
// most kChunk rows). The sort of a micro-batch (up to kBlockSortTokens) runs in one block, in
// shared memory: 18 us for 8192 tokens, where CUB's device-wide sort took five launches and 40.
#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/embedding.h"

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
// positions that lies in one aligned chunk of kChunk positions, so no block sums more than kChunk
// rows (a frequent token, several percent of real text, makes a run of hundreds, and one block
// summing them all took 0.38 ms). A piece that is its id's whole run is added straight into the
// table row; the others go to a slot of `pieces` (2 per chunk: the piece that continues the
// previous chunk's run, and the one that begins a run continuing into the next), and a second
// pass adds them to the row in order. The order is fixed by the sort, so the sums are bitwise
// reproducible.
constexpr int64_t kChunk = 32;
constexpr int kRun = 2;  // a piece's rows in flight together (4 measured no faster)

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

// Block p acts if sorted position p starts a piece; it sums the piece's rows in token order
// (stable sort), seeded with the table row when the piece is the id's whole run.
template <int V>
__global__ void embedding_backward_kernel(float* dtable, float* pieces, const __nv_bfloat16* dout,
                                          const int32_t* sorted_ids, const int32_t* sorted_tokens,
                                          int64_t tokens, int64_t hidden) {
    const int64_t p = blockIdx.x;
    const int32_t id = sorted_ids[p];
    const int64_t chunk = p / kChunk;
    const int64_t chunk_begin = chunk * kChunk;
    const bool after_same = p > 0 && sorted_ids[p - 1] == id;
    if (p > chunk_begin && after_same) return;  // inside a piece
    const int64_t chunk_end = min(tokens, chunk_begin + kChunk);
    int64_t end = p + 1;
    while (end < chunk_end && sorted_ids[end] == id) ++end;
    const bool from_prev = after_same;  // p is the chunk's first position here
    const bool into_next = end == chunk_end && end < tokens && sorted_ids[end] == id;
    const bool whole_run = !from_prev && !into_next;
    float* out = whole_run ? dtable + static_cast<int64_t>(id) * hidden
                           : pieces + (2 * chunk + (from_prev ? 0 : 1)) * hidden;
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < hidden; c += blockDim.x * V) {
        float acc[V] = {};
        if (whole_run) load_f32<V>(out + c, acc);
        for (int64_t i0 = p; i0 < end; i0 += kRun) {
            float v[kRun][V];
#pragma unroll
            for (int j = 0; j < kRun; ++j) {
                if (i0 + j < end) {
                    cuda::load_vec<V>(
                        dout + static_cast<int64_t>(sorted_tokens[i0 + j]) * hidden + c, v[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < kRun; ++j) {
                if (i0 + j < end) {
#pragma unroll
                    for (int i = 0; i < V; ++i) acc[i] += v[j][i];
                }
            }
        }
        store_f32<V>(out + c, acc);
    }
}

// Block c acts if chunk c's last piece begins a run that continues into later chunks: it adds
// that piece, then each later chunk's first piece while the run lasts, to the table row.
template <int V>
__global__ void embedding_pieces_kernel(float* dtable, const float* pieces,
                                        const int32_t* sorted_ids, int64_t tokens, int64_t hidden) {
    const int64_t chunk = blockIdx.x;
    const int64_t begin = chunk * kChunk;
    const int64_t next = begin + kChunk;  // the next chunk's first position
    if (next >= tokens) return;
    const int32_t id = sorted_ids[next - 1];
    if (sorted_ids[next] != id) return;  // the last piece ends its run
    // Sorted ids: equal at begin - 1 and next - 1 means the whole chunk continues an earlier run.
    if (begin > 0 && sorted_ids[begin - 1] == id) return;
    // The later chunks the run reaches: those whose first position holds id, a prefix of the
    // chunks after this one (sorted), counted a block's width at a time.
    int64_t later = 0;
    for (;;) {
        const int64_t k = chunk + 1 + later + threadIdx.x;
        const int n = __syncthreads_count(k * kChunk < tokens && sorted_ids[k * kChunk] == id);
        later += n;
        if (n < static_cast<int>(blockDim.x)) break;
    }
    float* row = dtable + static_cast<int64_t>(id) * hidden;
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * V; c < hidden; c += blockDim.x * V) {
        float acc[V], v[V];
        load_f32<V>(row + c, acc);
        load_f32<V>(pieces + (2 * chunk + 1) * hidden + c, v);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += v[i];
#pragma unroll 4
        for (int64_t k = chunk + 1; k <= chunk + later; ++k) {
            load_f32<V>(pieces + 2 * k * hidden + c, v);
#pragma unroll
            for (int i = 0; i < V; ++i) acc[i] += v[i];
        }
        store_f32<V>(row + c, acc);
    }
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

size_t embedding_backward_workspace_bytes(int64_t tokens, int64_t hidden) {
    return 3 * align_up(sizeof(int32_t) * static_cast<size_t>(tokens)) +
           align_up(sort_temp_bytes(tokens)) +
           sizeof(float) * static_cast<size_t>(2 * chunks(tokens) * hidden);
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
    auto* pieces = reinterpret_cast<float*>(ws + 3 * ids_bytes + align_up(sort_temp_bytes(tokens)));
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
    const bool vec = hidden % 8 == 0 && cuda::aligned16(dout) && cuda::aligned16(dtable) &&
                     cuda::aligned16(workspace);
    const int threads = cuda::row_threads(vec ? hidden / 8 : hidden);
    auto* sum_pieces = vec ? embedding_backward_kernel<8> : embedding_backward_kernel<1>;
    sum_pieces<<<static_cast<unsigned>(tokens), threads, 0, stream>>>(
        dtable, pieces, dout, sorted_ids, sorted_tokens, tokens, hidden);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    auto* add_pieces = vec ? embedding_pieces_kernel<8> : embedding_pieces_kernel<1>;
    add_pieces<<<static_cast<unsigned>(chunks(tokens)), threads, 0, stream>>>(
        dtable, pieces, sorted_ids, tokens, hidden);
    return cudaGetLastError();
}

}  // namespace deltatune
