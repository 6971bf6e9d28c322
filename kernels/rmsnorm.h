// Zero-centred RMSNorm (Qwen3.5 input/post/final norms and q_norm/k_norm): the weight is stored as
// the offset from 1.  y = x * rstd * (1 + w),  rstd = 1 / sqrt(mean(x^2) + eps), per row.
// Gradient contract: dx is written (=), dw is accumulated (+=).
#pragma once
#include <cstdint>

namespace deltatune {

// out, x: (rows, cols); w: (cols); rstd: (rows), saved for backward.
template <typename T>
void rmsnorm_forward_ref(T* out, T* rstd, const T* x, const T* w, int64_t rows, int64_t cols,
                         T eps);
template <typename T>
void rmsnorm_backward_ref(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                          int64_t rows, int64_t cols);

}  // namespace deltatune
