// Device helper for packed (varlen) batches: which document a token belongs to.
#pragma once

#include <cstdint>

namespace deltatune::cuda {

// The document holding token t: the last d with cu_seqlens[d] <= t (empty documents skipped).
__device__ __forceinline__ int64_t doc_of(const int32_t* cu_seqlens, int64_t num_docs, int64_t t) {
    int64_t lo = 0, hi = num_docs - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (cu_seqlens[mid] <= t) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

}  // namespace deltatune::cuda
