// CPU reference for the bias-free linear layer y = x W^T (PyTorch weight layout). Loop orders keep
// every inner loop contiguous and rows are spread over OpenMP threads, since the CPU training path
// calls this at real sizes (a 152k-row LM head); each output element is still summed by one thread
// in a fixed order, so results do not depend on the thread count.
#include "kernels/mlp/linear.h"

#include <algorithm>
#include <vector>

namespace deltatune {

template <typename T>
void linear_forward_ref(T* y, const T* x, const T* w, int64_t rows, int64_t in_features,
                        int64_t out_features) {
    // y[r, o] = x[r, :] . w[o, :]. Each weight row is read once per block of four input rows
    // (four dot products share every load of w), which matters when w is a large LM head.
    constexpr int64_t kRowBlock = 4;
#pragma omp parallel for schedule(static) if (rows * out_features * in_features > (1 << 20))
    for (int64_t o = 0; o < out_features; ++o) {
        const T* wo = w + o * in_features;
        int64_t r = 0;
        for (; r + kRowBlock <= rows; r += kRowBlock) {
            const T* x0 = x + r * in_features;
            const T* x1 = x0 + in_features;
            const T* x2 = x1 + in_features;
            const T* x3 = x2 + in_features;
            T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
            for (int64_t i = 0; i < in_features; ++i) {
                a0 += x0[i] * wo[i];
                a1 += x1[i] * wo[i];
                a2 += x2[i] * wo[i];
                a3 += x3[i] * wo[i];
            }
            y[r * out_features + o] = a0;
            y[(r + 1) * out_features + o] = a1;
            y[(r + 2) * out_features + o] = a2;
            y[(r + 3) * out_features + o] = a3;
        }
        for (; r < rows; ++r) {
            const T* xr = x + r * in_features;
            T acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < in_features; ++i) acc += xr[i] * wo[i];
            y[r * out_features + o] = acc;
        }
    }
}

template <typename T>
void linear_backward_ref(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t rows,
                         int64_t in_features, int64_t out_features) {
    const bool parallel = rows * out_features * in_features > (1 << 20);
    if (dx != nullptr) {
        // dx[r, :] = sum_o dy[r, o] * w[o, :], o ascending. Blocks of rows share each pass over
        // w, so a large w is streamed rows / kRowBlock times instead of once per row.
        constexpr int64_t kRowBlock = 16;
#pragma omp parallel for schedule(static) if (parallel)
        for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
            const int64_t nr = std::min(kRowBlock, rows - r0);
            T* dxb = dx + r0 * in_features;
            std::fill(dxb, dxb + nr * in_features, T(0));
            for (int64_t o = 0; o < out_features; ++o) {
                const T* wo = w + o * in_features;
                for (int64_t k = 0; k < nr; ++k) {
                    const T d = dy[(r0 + k) * out_features + o];
                    T* dxr = dxb + k * in_features;
#pragma omp simd
                    for (int64_t i = 0; i < in_features; ++i) dxr[i] += d * wo[i];
                }
            }
        }
    }
    if (dw != nullptr) {
        // dw[o, :] += sum_r dy[r, o] * x[r, :], r ascending. A block of output rows is owned by
        // one thread and walks dy along contiguous columns o.
        constexpr int64_t kOutBlock = 16;
#pragma omp parallel for schedule(static) if (parallel)
        for (int64_t o0 = 0; o0 < out_features; o0 += kOutBlock) {
            const int64_t no = std::min(kOutBlock, out_features - o0);
            for (int64_t r = 0; r < rows; ++r) {
                const T* xr = x + r * in_features;
                const T* dyr = dy + r * out_features + o0;
                for (int64_t k = 0; k < no; ++k) {
                    const T d = dyr[k];
                    T* dwo = dw + (o0 + k) * in_features;
#pragma omp simd
                    for (int64_t i = 0; i < in_features; ++i) dwo[i] += d * xr[i];
                }
            }
        }
    }
}

template <typename T>
void lora_forward_ref(T* y, const T* x, const T* a, const T* b, int64_t rows, int64_t in_features,
                      int64_t out_features, int64_t rank, T scale) {
    std::vector<T> u(static_cast<size_t>(rows * rank)), v(static_cast<size_t>(rows * out_features));
    linear_forward_ref(u.data(), x, a, rows, in_features, rank);
    linear_forward_ref(v.data(), u.data(), b, rows, rank, out_features);
    for (size_t i = 0; i < v.size(); ++i) y[i] += scale * v[i];
}

template <typename T>
void lora_backward_ref(T* dx, T* da, T* db, const T* dy, const T* x, const T* a, const T* b,
                       int64_t rows, int64_t in_features, int64_t out_features, int64_t rank,
                       T scale) {
    // The branch's own intermediates: u = x A^T (rows, rank), the scaled output gradient, and
    // g = scale dy B (rows, rank).
    std::vector<T> u(static_cast<size_t>(rows * rank)), g(u.size());
    std::vector<T> dys(dy, dy + rows * out_features);
    for (T& d : dys) d *= scale;
    linear_forward_ref(u.data(), x, a, rows, in_features, rank);
    linear_backward_ref(g.data(), db, dys.data(), u.data(), b, rows, rank, out_features);
    std::vector<T> dxl(dx ? static_cast<size_t>(rows * in_features) : 0);
    linear_backward_ref(dx ? dxl.data() : nullptr, da, g.data(), x, a, rows, in_features, rank);
    if (dx) {
        for (size_t i = 0; i < dxl.size(); ++i) dx[i] += dxl[i];
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

template void lora_forward_ref<float>(float*, const float*, const float*, const float*, int64_t,
                                      int64_t, int64_t, int64_t, float);
template void lora_forward_ref<double>(double*, const double*, const double*, const double*,
                                       int64_t, int64_t, int64_t, int64_t, double);
template void lora_backward_ref<float>(float*, float*, float*, const float*, const float*,
                                       const float*, const float*, int64_t, int64_t, int64_t,
                                       int64_t, float);
template void lora_backward_ref<double>(double*, double*, double*, const double*, const double*,
                                        const double*, const double*, int64_t, int64_t, int64_t,
                                        int64_t, double);

}  // namespace deltatune
