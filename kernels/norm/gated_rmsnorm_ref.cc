// CPU reference for the Gated DeltaNet's output norm, y = w * (x * rstd) * silu(z), in the
// operation order of transformers' Qwen3.5 RMSNormGated. Sums over a row and dw's sum over rows
// accumulate in double whatever T is.
#include <cmath>
#include <vector>

#include "kernels/norm/gated_rmsnorm.h"

namespace deltatune {
namespace {

template <typename T>
T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}

// torch's silu is x / (1 + exp(-x)); the same expression keeps fp32 parity.
template <typename T>
T silu(T x) {
    return x / (T(1) + std::exp(-x));
}

}  // namespace

template <typename T>
void gated_rmsnorm_forward_ref(T* out, T* rstd, const T* x, const T* z, const T* w, int64_t rows,
                               int64_t cols, T eps) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        const T* zr = z + r * cols;
        T* yr = out + r * cols;
        double sum_sq = 0;
        for (int64_t c = 0; c < cols; ++c) {
            sum_sq += static_cast<double>(xr[c]) * xr[c];
        }
        const T rs = static_cast<T>(1.0 / std::sqrt(sum_sq / static_cast<double>(cols) + eps));
        rstd[r] = rs;
        for (int64_t c = 0; c < cols; ++c) {
            yr[c] = (w[c] * (xr[c] * rs)) * silu(zr[c]);
        }
    }
}

template <typename T>
void gated_rmsnorm_backward_ref(T* dx, T* dz, T* dw, const T* dout, const T* x, const T* z,
                                const T* w, const T* rstd, int64_t rows, int64_t cols) {
    std::vector<double> dw_acc(dw, dw + cols);
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        const T* zr = z + r * cols;
        const T* dyr = dout + r * cols;
        T* dxr = dx + r * cols;
        T* dzr = dz + r * cols;
        const T rs = rstd[r];
        // The gate and weight act elementwise after the norm, so h = dy * silu(z) * w is the
        // gradient reaching xhat, and dx = rstd * (h - xhat * mean(h * xhat)).
        double mean_h_xhat = 0;
        for (int64_t c = 0; c < cols; ++c) {
            const T xhat = xr[c] * rs;
            const T sig = sigmoid(zr[c]);
            const T act = silu(zr[c]);
            // d silu(z) / dz = sig(z) * (1 + z * (1 - sig(z))).
            dzr[c] = dyr[c] * w[c] * xhat * sig * (T(1) + zr[c] * (T(1) - sig));
            dw_acc[c] += static_cast<double>(dyr[c]) * act * xhat;
            mean_h_xhat += static_cast<double>(dyr[c]) * act * w[c] * xhat;
        }
        mean_h_xhat /= static_cast<double>(cols);
        for (int64_t c = 0; c < cols; ++c) {
            const double xhat = static_cast<double>(xr[c]) * rs;
            const double h = static_cast<double>(dyr[c]) * silu(zr[c]) * w[c];
            dxr[c] = static_cast<T>(rs * (h - xhat * mean_h_xhat));
        }
    }
    for (int64_t c = 0; c < cols; ++c) dw[c] = static_cast<T>(dw_acc[c]);
}

template void gated_rmsnorm_forward_ref<float>(float*, float*, const float*, const float*,
                                               const float*, int64_t, int64_t, float);
template void gated_rmsnorm_forward_ref<double>(double*, double*, const double*, const double*,
                                                const double*, int64_t, int64_t, double);
template void gated_rmsnorm_backward_ref<float>(float*, float*, float*, const float*, const float*,
                                                const float*, const float*, const float*, int64_t,
                                                int64_t);
template void gated_rmsnorm_backward_ref<double>(double*, double*, double*, const double*,
                                                 const double*, const double*, const double*,
                                                 const double*, int64_t, int64_t);

}  // namespace deltatune
