// CPU reference for the bias-free linear layer y = x W^T (PyTorch weight layout). Loop orders keep
// every inner loop contiguous and rows are spread over OpenMP threads, since the CPU training path
// calls this at real sizes (a 152k-row LM head); each output element is still summed by one thread
// in a fixed order, so results do not depend on the thread count.
#include "kernels/linear.h"

namespace deltatune {

template <typename T>
void linear_forward_ref(T* y, const T* x, const T* w, int64_t rows, int64_t in_features,
                        int64_t out_features) {
    // y[r, o] = x[r, :] . w[o, :], both rows contiguous.
#pragma omp parallel for schedule(static) if (rows * out_features * in_features > (1 << 20))
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * in_features;
        for (int64_t o = 0; o < out_features; ++o) {
            const T* wo = w + o * in_features;
            T acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < in_features; ++i) {
                acc += xr[i] * wo[i];
            }
            y[r * out_features + o] = acc;
        }
    }
}

template <typename T>
void linear_backward_ref(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t rows,
                         int64_t in_features, int64_t out_features) {
    if (dx != nullptr) {
        // dx[r, :] = sum_o dy[r, o] * w[o, :], accumulated row by row of w.
#pragma omp parallel for schedule(static) if (rows * out_features * in_features > (1 << 20))
        for (int64_t r = 0; r < rows; ++r) {
            T* dxr = dx + r * in_features;
            for (int64_t i = 0; i < in_features; ++i) {
                dxr[i] = 0;
            }
            for (int64_t o = 0; o < out_features; ++o) {
                const T d = dy[r * out_features + o];
                const T* wo = w + o * in_features;
                for (int64_t i = 0; i < in_features; ++i) {
                    dxr[i] += d * wo[i];
                }
            }
        }
    }
    if (dw != nullptr) {
        // dw[o, :] += sum_r dy[r, o] * x[r, :], each row of dw owned by one thread, r ascending.
#pragma omp parallel for schedule(static) if (rows * out_features * in_features > (1 << 20))
        for (int64_t o = 0; o < out_features; ++o) {
            T* dwo = dw + o * in_features;
            for (int64_t r = 0; r < rows; ++r) {
                const T d = dy[r * out_features + o];
                const T* xr = x + r * in_features;
                for (int64_t i = 0; i < in_features; ++i) {
                    dwo[i] += d * xr[i];
                }
            }
        }
    }
}

template void linear_forward_ref<float>(float*, const float*, const float*, int64_t, int64_t,
                                        int64_t);
template void linear_forward_ref<double>(double*, const double*, const double*, int64_t, int64_t,
                                         int64_t);
template void linear_backward_ref<float>(float*, float*, const float*, const float*, const float*,
                                         int64_t, int64_t, int64_t);
template void linear_backward_ref<double>(double*, double*, const double*, const double*,
                                          const double*, int64_t, int64_t, int64_t);

}  // namespace deltatune
