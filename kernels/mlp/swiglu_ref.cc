// CPU reference for the SwiGLU activation of the dense MLP, h = silu(gate) * up.
#include <cmath>

#include "kernels/mlp/swiglu.h"

namespace deltatune {

template <typename T>
void swiglu_forward_ref(T* h, const T* gate, const T* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        // torch's silu: x / (1 + exp(-x)).
        h[i] = gate[i] / (T(1) + std::exp(-gate[i])) * up[i];
    }
}

template <typename T>
void swiglu_backward_ref(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const T sig = T(1) / (T(1) + std::exp(-gate[i]));
        const T silu = gate[i] * sig;
        // d silu(x) / dx = sig(x) * (1 + x * (1 - sig(x))).
        dgate[i] = dh[i] * up[i] * sig * (T(1) + gate[i] * (T(1) - sig));
        dup[i] = dh[i] * silu;
    }
}

template void swiglu_forward_ref<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward_ref<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward_ref<float>(float*, float*, const float*, const float*, const float*,
                                         int64_t);
template void swiglu_backward_ref<double>(double*, double*, const double*, const double*,
                                          const double*, int64_t);

}  // namespace deltatune
