// L2 normalisation of q and k heads in the Gated DeltaNet (FLA / transformers convention):
//   y = x * rnorm,  rnorm = 1 / sqrt(sum(x^2) + eps), per row.
// Gradient contract: dx is written (=).
#pragma once
#include <cstdint>

namespace deltatune {

// out, x: (rows, cols); rnorm: (rows), saved for backward.
template <typename T>
void l2norm_forward_ref(T* out, T* rnorm, const T* x, int64_t rows, int64_t cols, T eps);
template <typename T>
void l2norm_backward_ref(T* dx, const T* dout, const T* out, const T* rnorm, int64_t rows,
                         int64_t cols);

}  // namespace deltatune
