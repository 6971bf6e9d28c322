// Work planning for multi-tensor kernels: every tensor is cut into fixed-size chunks, numbered
// consecutively across tensors; a block takes chunks and finds its tensor by binary search.
#pragma once

#include <cstdint>

namespace deltatune {

inline constexpr int64_t kMultiTensorChunk = 4096;  // elements per chunk

// T has fields `n` and `chunk_begin`. Returns the total number of chunks.
template <typename T>
int64_t plan_chunks(T* tensors, int num_tensors) {
    int64_t next = 0;
    for (int i = 0; i < num_tensors; ++i) {
        tensors[i].chunk_begin = next;
        next += (tensors[i].n + kMultiTensorChunk - 1) / kMultiTensorChunk;
    }
    return next;
}

#ifdef __CUDACC__
// Index of the last tensor whose chunk_begin <= chunk (tensors with n = 0 own no chunk).
template <typename T>
__device__ __forceinline__ int find_tensor(const T* tensors, int num_tensors, int64_t chunk) {
    int lo = 0;
    int hi = num_tensors - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (tensors[mid].chunk_begin <= chunk) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}
#endif

}  // namespace deltatune
