// Token embedding on the GPU: a row gather forward and a deterministic scatter-add backward
// (stable radix sort of (id, token), then one block per distinct id summing its rows in order).
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

__global__ void iota_kernel(int32_t* v, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) v[i] = static_cast<int32_t>(i);
}

// Block b handles sorted position b if it starts a run of equal ids; the run's rows are added
// in token order (stable sort) into an fp32 accumulator seeded with the current dtable row.
// Vectorised: 8 columns per thread (16-byte dout loads, two 16-byte accumulator loads/stores).
__global__ void embedding_backward_kernel(float* dtable, const __nv_bfloat16* dout,
                                          const int32_t* sorted_ids, const int32_t* sorted_tokens,
                                          int64_t tokens, int64_t hidden, bool vectorized) {
    const int64_t b = blockIdx.x;
    const int32_t id = sorted_ids[b];
    if (b > 0 && sorted_ids[b - 1] == id) return;
    int64_t end = b + 1;
    while (end < tokens && sorted_ids[end] == id) ++end;
    float* row = dtable + static_cast<int64_t>(id) * hidden;
    if (vectorized) {
        for (int64_t c = static_cast<int64_t>(threadIdx.x) * 8; c < hidden; c += blockDim.x * 8) {
            float4* acc4 = reinterpret_cast<float4*>(row + c);
            float4 lo = acc4[0], hi = acc4[1];
            for (int64_t i = b; i < end; ++i) {
                float v[8];
                cuda::load8(dout + static_cast<int64_t>(sorted_tokens[i]) * hidden + c, v);
                lo.x += v[0], lo.y += v[1], lo.z += v[2], lo.w += v[3];
                hi.x += v[4], hi.y += v[5], hi.z += v[6], hi.w += v[7];
            }
            acc4[0] = lo;
            acc4[1] = hi;
        }
        return;
    }
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
        float acc = row[c];
        for (int64_t i = b; i < end; ++i) {
            acc += __bfloat162float(dout[static_cast<int64_t>(sorted_tokens[i]) * hidden + c]);
        }
        row[c] = acc;
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
    embedding_forward_kernel<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(
        out, table, ids, hidden, vectorized);
    return cudaGetLastError();
}

size_t embedding_backward_workspace_bytes(int64_t tokens) {
    return 3 * align_up(sizeof(int32_t) * static_cast<size_t>(tokens)) +
           align_up(sort_temp_bytes(tokens));
}

cudaError_t embedding_backward(float* dtable, const __nv_bfloat16* dout, const int32_t* ids,
                               int64_t tokens, int64_t hidden, int64_t vocab, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
    if (tokens == 0 || hidden == 0) return cudaSuccess;
    if (workspace_bytes < embedding_backward_workspace_bytes(tokens)) return cudaErrorInvalidValue;
    const size_t ids_bytes = align_up(sizeof(int32_t) * static_cast<size_t>(tokens));
    char* ws = static_cast<char*>(workspace);
    auto* sorted_ids = reinterpret_cast<int32_t*>(ws);
    auto* token_index = reinterpret_cast<int32_t*>(ws + ids_bytes);
    auto* sorted_tokens = reinterpret_cast<int32_t*>(ws + 2 * ids_bytes);
    void* temp = ws + 3 * ids_bytes;
    size_t temp_bytes = sort_temp_bytes(tokens);
    iota_kernel<<<static_cast<unsigned>((tokens + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        token_index, tokens);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (cudaError_t e = cub::DeviceRadixSort::SortPairs(
            temp, temp_bytes, ids, sorted_ids, token_index, sorted_tokens, static_cast<int>(tokens),
            0, id_bits(vocab), stream);
        e != cudaSuccess) {
        return e;
    }
    const bool vectorized = hidden % 8 == 0 && cuda::aligned16(dout) && cuda::aligned16(dtable);
    embedding_backward_kernel<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(
        dtable, dout, sorted_ids, sorted_tokens, tokens, hidden, vectorized);
    return cudaGetLastError();
}

}  // namespace deltatune
