// CPU reference for the Gated DeltaNet's q/k L2 normalisation, y = x * rsqrt(sum(x^2) + eps).
// Row sums accumulate in double whatever T is.
#include <cmath>

#include "kernels/norm/l2norm.h"

namespace deltatune {

template <typename T>
void l2norm_forward_ref(T* out, T* rnorm, const T* x, int64_t rows, int64_t cols, T eps) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        double sum_sq = 0;
        for (int64_t c = 0; c < cols; ++c) {
            sum_sq += static_cast<double>(xr[c]) * xr[c];
        }
        const T rn = static_cast<T>(1.0 / std::sqrt(sum_sq + eps));
        rnorm[r] = rn;
        for (int64_t c = 0; c < cols; ++c) {
            out[r * cols + c] = xr[c] * rn;
        }
    }
}

template <typename T>
void l2norm_backward_ref(T* dx, const T* dout, const T* out, const T* rnorm, int64_t rows,
                         int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* yr = out + r * cols;
        const T* dyr = dout + r * cols;
        // dx = rnorm * (dy - y * (y . dy)): exact with eps too, since d rnorm / dx = -rnorm^3 x.
        double y_dot_dy = 0;
        for (int64_t c = 0; c < cols; ++c) {
            y_dot_dy += static_cast<double>(yr[c]) * dyr[c];
        }
        for (int64_t c = 0; c < cols; ++c) {
            dx[r * cols + c] = static_cast<T>(rnorm[r] * (dyr[c] - yr[c] * y_dot_dy));
        }
    }
}

template void l2norm_forward_ref<float>(float*, float*, const float*, int64_t, int64_t, float);
template void l2norm_forward_ref<double>(double*, double*, const double*, int64_t, int64_t, double);
template void l2norm_backward_ref<float>(float*, const float*, const float*, const float*, int64_t,
                                         int64_t);
template void l2norm_backward_ref<double>(double*, const double*, const double*, const double*,
                                          int64_t, int64_t);

}  // namespace deltatune
