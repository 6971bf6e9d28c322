// Gradient rows that may be nonzero: an embedding's backward adds only into the rows of the ids
// it saw, so the optimizer can skip the rest (RowMask, kernels/optim/multi_tensor.h) and the
// next step need zero only those.
//   mark_rows:        touched[ids[i]] = 1 for every i < n.
//   zero_marked_rows: rows r with touched[r] set become zero (row_len values each), and their
//                     mark is cleared.
//   set_marked_rows:  dst[r] = value for the rows r with touched[r] set.
#pragma once
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune {

// CPU references. ids must lie in [0, rows).
void mark_rows_ref(uint8_t* touched, const int32_t* ids, int64_t n);
void zero_marked_rows_ref(float* grad, uint8_t* touched, int64_t rows, int64_t row_len);
void set_marked_rows_ref(int32_t* dst, const uint8_t* touched, int64_t rows, int32_t value);

#if DELTATUNE_HAVE_CUDA
// Device pointers, stream-ordered. mark_rows: ids in [0, rows of `touched`) (the embedding
// lookup checked them). zero_marked_rows: grad is rows x row_len fp32, 16-byte aligned with
// row_len a multiple of 4 for the vector path (else one value at a time).
cudaError_t mark_rows(uint8_t* touched, const int32_t* ids, int64_t n, cudaStream_t stream);
cudaError_t zero_marked_rows(float* grad, uint8_t* touched, int64_t rows, int64_t row_len,
                             cudaStream_t stream);
cudaError_t set_marked_rows(int32_t* dst, const uint8_t* touched, int64_t rows, int32_t value,
                            cudaStream_t stream);
#endif

}  // namespace deltatune
