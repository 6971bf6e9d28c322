// CPU reference for partial rotate-half RoPE. For T = float the angles follow transformers' fp32
// recipe step by step (inv_freq, pos * inv_freq, cos/sin all in fp32) so the parity is tight.
#include <cmath>
#include <vector>

#include "kernels/attention/rope.h"

namespace deltatune {
namespace {

// sign = +1 applies the rotation R, sign = -1 its transpose R^T (the same angles, sin negated).
template <typename T>
void rope_apply(T* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim,
                int64_t rotary_dim, double theta, T sign) {
    const int64_t half = rotary_dim / 2;
    std::vector<T> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        const T exponent = T(2 * i) / T(rotary_dim);
        inv_freq[static_cast<size_t>(i)] = T(1) / std::pow(T(theta), exponent);
    }
    std::vector<T> cos_t(static_cast<size_t>(half));
    std::vector<T> sin_t(static_cast<size_t>(half));
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < half; ++i) {
            const T freq = T(positions[t]) * inv_freq[static_cast<size_t>(i)];
            cos_t[static_cast<size_t>(i)] = std::cos(freq);
            sin_t[static_cast<size_t>(i)] = sign * std::sin(freq);
        }
        for (int64_t h = 0; h < heads; ++h) {
            T* xh = x + (t * heads + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const T c = cos_t[static_cast<size_t>(i)];
                const T s = sin_t[static_cast<size_t>(i)];
                const T x1 = xh[i];
                const T x2 = xh[i + half];
                xh[i] = x1 * c - x2 * s;
                xh[i + half] = x2 * c + x1 * s;
            }
        }
    }
}

}  // namespace

template <typename T>
void rope_forward_ref(T* x, const int32_t* positions, int64_t tokens, int64_t heads,
                      int64_t head_dim, int64_t rotary_dim, double theta) {
    rope_apply(x, positions, tokens, heads, head_dim, rotary_dim, theta, T(1));
}

template <typename T>
void rope_backward_ref(T* dx, const int32_t* positions, int64_t tokens, int64_t heads,
                       int64_t head_dim, int64_t rotary_dim, double theta) {
    rope_apply(dx, positions, tokens, heads, head_dim, rotary_dim, theta, T(-1));
}

template void rope_forward_ref<float>(float*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                      double);
template void rope_forward_ref<double>(double*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                       double);
template void rope_backward_ref<float>(float*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                       double);
template void rope_backward_ref<double>(double*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                        double);

}  // namespace deltatune
