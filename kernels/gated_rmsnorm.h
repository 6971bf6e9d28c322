// Gated RMSNorm of the Gated DeltaNet output ("norm before gate"), plain (not 1+w) weight:
//   y = w * (x * rstd) * silu(z),  rstd = 1 / sqrt(mean(x^2) + eps), per row of `cols` channels.
// Gradient contract: dx and dz are written (=), dw is accumulated (+=).
#pragma once
#include <cstdint>

namespace deltatune {

// out, x, z: (rows, cols); w: (cols); rstd: (rows), saved for backward.
template <typename T>
void gated_rmsnorm_forward_ref(T* out, T* rstd, const T* x, const T* z, const T* w, int64_t rows,
                               int64_t cols, T eps);
template <typename T>
void gated_rmsnorm_backward_ref(T* dx, T* dz, T* dw, const T* dout, const T* x, const T* z,
                                const T* w, const T* rstd, int64_t rows, int64_t cols);

}  // namespace deltatune
