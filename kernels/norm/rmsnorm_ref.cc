// CPU reference for the zero-centred RMSNorm, y = (x * rstd) * (1 + w), as transformers' Qwen3.5
// computes it (elementwise math in T, so T = float mirrors its fp32 upcast). Sums over a row and
// dw's sum over rows accumulate in double: the reference's own rounding stays at the outputs'.
#include <cmath>
#include <vector>

#include "kernels/norm/rmsnorm.h"

namespace deltatune {

template <typename T>
void rmsnorm_forward_ref(T* out, T* rstd, const T* x, const T* w, int64_t rows, int64_t cols,
                         T eps) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        T* yr = out + r * cols;
        double sum_sq = 0;
        for (int64_t c = 0; c < cols; ++c) {
            sum_sq += static_cast<double>(xr[c]) * xr[c];
        }
        const T rs = static_cast<T>(1.0 / std::sqrt(sum_sq / static_cast<double>(cols) + eps));
        rstd[r] = rs;
        for (int64_t c = 0; c < cols; ++c) {
            yr[c] = (xr[c] * rs) * (T(1) + w[c]);
        }
    }
}

template <typename T>
void rmsnorm_backward_ref(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                          int64_t rows, int64_t cols) {
    std::vector<double> dw_acc(dw, dw + cols);
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        const T* dyr = dout + r * cols;
        T* dxr = dx + r * cols;
        const double rs = rstd[r];
        // With xhat = x * rstd and h = dy * (1 + w): dx = rstd * (h - xhat * mean(h * xhat)).
        double mean_h_xhat = 0;
        for (int64_t c = 0; c < cols; ++c) {
            const double xhat = xr[c] * rs;
            mean_h_xhat += dyr[c] * (1.0 + w[c]) * xhat;
            dw_acc[c] += dyr[c] * xhat;
        }
        mean_h_xhat /= static_cast<double>(cols);
        for (int64_t c = 0; c < cols; ++c) {
            const double xhat = xr[c] * rs;
            dxr[c] = static_cast<T>(rs * (dyr[c] * (1.0 + w[c]) - xhat * mean_h_xhat));
        }
    }
    for (int64_t c = 0; c < cols; ++c) dw[c] = static_cast<T>(dw_acc[c]);
}

template void rmsnorm_forward_ref<float>(float*, float*, const float*, const float*, int64_t,
                                         int64_t, float);
template void rmsnorm_forward_ref<double>(double*, double*, const double*, const double*, int64_t,
                                          int64_t, double);
template void rmsnorm_backward_ref<float>(float*, float*, const float*, const float*, const float*,
                                          const float*, int64_t, int64_t);
template void rmsnorm_backward_ref<double>(double*, double*, const double*, const double*,
                                           const double*, const double*, int64_t, int64_t);

}  // namespace deltatune
