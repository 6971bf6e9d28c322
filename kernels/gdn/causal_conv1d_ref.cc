// CPU reference for the depthwise causal conv1d + SiLU over packed documents; the window is
// zero-padded at every document start, so no document sees another's tokens.
#include <cmath>
#include <vector>

#include "kernels/gdn/causal_conv1d.h"

namespace deltatune {
namespace {

// Pre-activation at (t, c): taps that would reach before `begin` (the document start) read 0.
template <typename T>
T conv_pre(const T* x, const T* w, int64_t t, int64_t c, int64_t begin, int64_t channels,
           int64_t kernel) {
    double pre = 0;
    for (int64_t j = 0; j < kernel; ++j) {
        const int64_t src = t - (kernel - 1) + j;
        if (src >= begin) {
            pre += static_cast<double>(w[c * kernel + j]) * x[src * channels + c];
        }
    }
    return static_cast<T>(pre);
}

}  // namespace

template <typename T>
void causal_conv1d_forward_ref(T* out, const T* x, const T* w, const int32_t* cu_seqlens,
                               int64_t num_docs, int64_t channels, int64_t kernel) {
    for (int64_t d = 0; d < num_docs; ++d) {
        const int64_t begin = cu_seqlens[d];
        const int64_t end = cu_seqlens[d + 1];
        for (int64_t t = begin; t < end; ++t) {
            for (int64_t c = 0; c < channels; ++c) {
                const T pre = conv_pre(x, w, t, c, begin, channels, kernel);
                // torch's silu: x / (1 + exp(-x)).
                out[t * channels + c] = pre / (T(1) + std::exp(-pre));
            }
        }
    }
}

template <typename T>
void causal_conv1d_backward_ref(T* dx, T* dw, const T* dout, const T* x, const T* w,
                                const int32_t* cu_seqlens, int64_t num_docs, int64_t channels,
                                int64_t kernel) {
    const int64_t tokens = cu_seqlens[num_docs];
    // Every output tap scatters into up to K inputs, so dx is built by accumulation from zero; dw
    // sums over every token. Both accumulate in double whatever T is.
    std::vector<double> dx_acc(static_cast<size_t>(tokens * channels), 0.0);
    std::vector<double> dw_acc(dw, dw + channels * kernel);
    for (int64_t d = 0; d < num_docs; ++d) {
        const int64_t begin = cu_seqlens[d];
        const int64_t end = cu_seqlens[d + 1];
        for (int64_t t = begin; t < end; ++t) {
            for (int64_t c = 0; c < channels; ++c) {
                const T pre = conv_pre(x, w, t, c, begin, channels, kernel);
                const T sig = T(1) / (T(1) + std::exp(-pre));
                // d silu(pre) / d pre = sig * (1 + pre * (1 - sig)).
                const T dpre = dout[t * channels + c] * sig * (T(1) + pre * (T(1) - sig));
                for (int64_t j = 0; j < kernel; ++j) {
                    const int64_t src = t - (kernel - 1) + j;
                    if (src >= begin) {
                        dx_acc[src * channels + c] += static_cast<double>(w[c * kernel + j]) * dpre;
                        dw_acc[c * kernel + j] += static_cast<double>(dpre) * x[src * channels + c];
                    }
                }
            }
        }
    }
    for (int64_t n = 0; n < tokens * channels; ++n) dx[n] = static_cast<T>(dx_acc[n]);
    for (int64_t n = 0; n < channels * kernel; ++n) dw[n] = static_cast<T>(dw_acc[n]);
}

template void causal_conv1d_forward_ref<float>(float*, const float*, const float*, const int32_t*,
                                               int64_t, int64_t, int64_t);
template void causal_conv1d_forward_ref<double>(double*, const double*, const double*,
                                                const int32_t*, int64_t, int64_t, int64_t);
template void causal_conv1d_backward_ref<float>(float*, float*, const float*, const float*,
                                                const float*, const int32_t*, int64_t, int64_t,
                                                int64_t);
template void causal_conv1d_backward_ref<double>(double*, double*, const double*, const double*,
                                                 const double*, const int32_t*, int64_t, int64_t,
                                                 int64_t);

}  // namespace deltatune
