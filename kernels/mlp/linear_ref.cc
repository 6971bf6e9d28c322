// CPU reference for the bias-free linear layer y = x W^T (PyTorch weight layout). Loop orders keep
// every inner loop contiguous and rows are spread over OpenMP threads, since the CPU training path
// calls this at real sizes (a 152k-row LM head); each output element is still summed by one thread
// in a fixed order, so results do not depend on the thread count. Every sum accumulates in double
// whatever T is: fp32 products rounded and summed in fp32 lost digits that tokens with cancelling
// sums amplified through the layers (docs/numerics.md).
#include "kernels/mlp/linear.h"

#include <algorithm>
#include <vector>

namespace deltatune {

namespace {

// Inputs are widened to double in panels of at most this many elements, so a large layer never
// holds a double copy of its whole input.
constexpr int64_t kPanelElements = int64_t{1} << 22;

// y[r, o] = x[r, :] . w[o, :] for the `rows` rows of one panel of x, already in double. Weight
// rows are widened in blocks that stay in cache while blocks of four input rows pass over them.
template <typename T>
void forward_panel(T* y, const double* x, const T* w, int64_t rows, int64_t in_features,
                   int64_t out_features, bool parallel) {
    constexpr int64_t kRowBlock = 4;
    const int64_t out_block = std::clamp<int64_t>(8192 / std::max<int64_t>(1, in_features), 1, 16);
#pragma omp parallel if (parallel)
    {
        std::vector<double> wb(static_cast<size_t>(out_block * in_features));
#pragma omp for schedule(static)
        for (int64_t o0 = 0; o0 < out_features; o0 += out_block) {
            const int64_t no = std::min(out_block, out_features - o0);
            std::copy(w + o0 * in_features, w + (o0 + no) * in_features, wb.begin());
            for (int64_t r = 0; r < rows; r += kRowBlock) {
                const int64_t nr = std::min(kRowBlock, rows - r);
                // A short last block repeats its first row; only nr results are kept.
                const double* x0 = x + r * in_features;
                const double* x1 = x0 + (nr > 1 ? in_features : 0);
                const double* x2 = x0 + (nr > 2 ? 2 * in_features : 0);
                const double* x3 = x0 + (nr > 3 ? 3 * in_features : 0);
                for (int64_t k = 0; k < no; ++k) {
                    const double* wp = wb.data() + k * in_features;
                    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
                    for (int64_t i = 0; i < in_features; ++i) {
                        a0 += x0[i] * wp[i];
                        a1 += x1[i] * wp[i];
                        a2 += x2[i] * wp[i];
                        a3 += x3[i] * wp[i];
                    }
                    const double a[kRowBlock] = {a0, a1, a2, a3};
                    for (int64_t j = 0; j < nr; ++j) {
                        y[(r + j) * out_features + o0 + k] = static_cast<T>(a[j]);
                    }
                }
            }
        }
    }
}

}  // namespace

template <typename T>
void linear_forward_ref(T* y, const T* x, const T* w, int64_t rows, int64_t in_features,
                        int64_t out_features) {
    const bool parallel = rows * out_features * in_features > (1 << 20);
    const int64_t panel_rows =
        std::max<int64_t>(1, kPanelElements / std::max<int64_t>(1, in_features));
    std::vector<double> xd;
    for (int64_t r0 = 0; r0 < rows; r0 += panel_rows) {
        const int64_t n = std::min(panel_rows, rows - r0);
        xd.assign(x + r0 * in_features, x + (r0 + n) * in_features);
        forward_panel(y + r0 * out_features, xd.data(), w, n, in_features, out_features, parallel);
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
#pragma omp parallel if (parallel)
        {
            std::vector<double> acc(static_cast<size_t>(kRowBlock * in_features));
#pragma omp for schedule(static)
            for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
                const int64_t nr = std::min(kRowBlock, rows - r0);
                std::fill(acc.begin(), acc.end(), 0.0);
                for (int64_t o = 0; o < out_features; ++o) {
                    const T* wo = w + o * in_features;
                    for (int64_t k = 0; k < nr; ++k) {
                        const double d = dy[(r0 + k) * out_features + o];
                        double* dxr = acc.data() + k * in_features;
#pragma omp simd
                        for (int64_t i = 0; i < in_features; ++i) dxr[i] += d * wo[i];
                    }
                }
                T* dxb = dx + r0 * in_features;
                for (int64_t i = 0; i < nr * in_features; ++i) dxb[i] = static_cast<T>(acc[i]);
            }
        }
    }
    if (dw != nullptr) {
        // dw[o, :] += sum_r dy[r, o] * x[r, :], r ascending. A block of output rows is owned by
        // one thread and walks dy along contiguous columns o.
        constexpr int64_t kOutBlock = 16;
#pragma omp parallel if (parallel)
        {
            std::vector<double> acc(static_cast<size_t>(kOutBlock * in_features));
#pragma omp for schedule(static)
            for (int64_t o0 = 0; o0 < out_features; o0 += kOutBlock) {
                const int64_t no = std::min(kOutBlock, out_features - o0);
                T* dwb = dw + o0 * in_features;
                std::copy(dwb, dwb + no * in_features, acc.begin());
                for (int64_t r = 0; r < rows; ++r) {
                    const T* xr = x + r * in_features;
                    const T* dyr = dy + r * out_features + o0;
                    for (int64_t k = 0; k < no; ++k) {
                        const double d = dyr[k];
                        double* dwo = acc.data() + k * in_features;
#pragma omp simd
                        for (int64_t i = 0; i < in_features; ++i) dwo[i] += d * xr[i];
                    }
                }
                for (int64_t i = 0; i < no * in_features; ++i) dwb[i] = static_cast<T>(acc[i]);
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
