// CPU reference for the zero-centred RMSNorm, y = (x * rstd) * (1 + w), as transformers' Qwen3.5
// computes it (all math in T, so T = float mirrors its fp32 upcast).
#include <cmath>

#include "kernels/norm/rmsnorm.h"

namespace deltatune {

template <typename T>
void rmsnorm_forward_ref(T* out, T* rstd, const T* x, const T* w, int64_t rows, int64_t cols,
                         T eps) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        T* yr = out + r * cols;
        T sum_sq = 0;
        for (int64_t c = 0; c < cols; ++c) {
            sum_sq += xr[c] * xr[c];
        }
        const T rs = T(1) / std::sqrt(sum_sq / T(cols) + eps);
        rstd[r] = rs;
        for (int64_t c = 0; c < cols; ++c) {
            yr[c] = (xr[c] * rs) * (T(1) + w[c]);
        }
    }
}

template <typename T>
void rmsnorm_backward_ref(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                          int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        const T* dyr = dout + r * cols;
        T* dxr = dx + r * cols;
        const T rs = rstd[r];
        // With xhat = x * rstd and h = dy * (1 + w): dx = rstd * (h - xhat * mean(h * xhat)).
        T mean_h_xhat = 0;
        for (int64_t c = 0; c < cols; ++c) {
            const T xhat = xr[c] * rs;
            mean_h_xhat += dyr[c] * (T(1) + w[c]) * xhat;
            dw[c] += dyr[c] * xhat;
        }
        mean_h_xhat /= T(cols);
        for (int64_t c = 0; c < cols; ++c) {
            const T xhat = xr[c] * rs;
            dxr[c] = rs * (dyr[c] * (T(1) + w[c]) - xhat * mean_h_xhat);
        }
    }
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
