// Row gather of a (rows, cols) matrix by an index list, an index below 0 giving a zero row:
//   out[i, :] = idx[i] >= 0 ? in[idx[i], :] : 0      for i < n.
// The label-only LM head (runtime/model/label_rows.h) gathers the labeled rows of the final hidden
// states with it, and spreads their gradient back over the batch (zeros elsewhere) the same way.
#pragma once

#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

// CPU reference (T = float, double, or uint16_t bf16 bits). Indices must lie below in's rows.
template <typename T>
void gather_rows_ref(T* out, const T* in, const int32_t* idx, int64_t n, int64_t cols);

#if DELTATUNE_HAVE_CUDA
// Device pointers (idx too), stream-ordered, never synchronises. Any alignment; 16-byte copies
// where cols is a multiple of 8 and in and out are 16-byte aligned.
cudaError_t gather_rows(__nv_bfloat16* out, const __nv_bfloat16* in, const int32_t* idx, int64_t n,
                        int64_t cols, cudaStream_t stream);
#endif

}  // namespace deltatune
