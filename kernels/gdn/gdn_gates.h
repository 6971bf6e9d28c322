// The Gated DeltaNet's per-token, per-value-head gates:
//   beta = sigmoid(b),   g = -exp(A_log[h]) * softplus(a + dt_bias[h])   (g is the log decay, <= 0)
// softplus follows torch (threshold 20: softplus(x) = x for x > 20).
// Gradient contract: db, da are written (=); dA_log, ddt_bias are accumulated (+=).
#pragma once
#include <cstdint>

namespace deltatune {

// b, a, beta, g: (tokens, heads); A_log, dt_bias: (heads).
template <typename T>
void gdn_gates_forward_ref(T* beta, T* g, const T* b, const T* a, const T* A_log, const T* dt_bias,
                           int64_t tokens, int64_t heads);
template <typename T>
void gdn_gates_backward_ref(T* db, T* da, T* dA_log, T* ddt_bias, const T* dbeta, const T* dg,
                            const T* b, const T* a, const T* A_log, const T* dt_bias,
                            int64_t tokens, int64_t heads);

}  // namespace deltatune
