// SwiGLU activation of the dense MLP: h = silu(gate) * up, elementwise.
// Gradient contract: dgate and dup are written (=).
#pragma once
#include <cstdint>

namespace deltatune {

template <typename T>
void swiglu_forward_ref(T* h, const T* gate, const T* up, int64_t n);
template <typename T>
void swiglu_backward_ref(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n);

}  // namespace deltatune
