// The gated delta rule, per-token recurrent form (the oracle for the chunked CUDA kernel). Per
// document and value head j (reading key head j / r, r = v_heads / k_heads), state S (dk x dv) = 0
// at each document start:
//   S' = exp(g_t) S;  p = S'^T k_t;  delta = beta_t (v_t - p);  S = S' + k_t delta^T;
//   o_t = S^T (scale * q_t)
// q and k arrive already L2-normalised; `scale` (dk^-1/2 in the model) is applied to q here.
// Gradient contract: all gradients are written (=); dq, dk sum over the value heads of a group.
#pragma once
#include <cstdint>

namespace deltatune {

// q, k: (tokens, k_heads, dk); v, out: (tokens, v_heads, dv); g, beta: (tokens, v_heads).
template <typename T>
void gated_delta_rule_forward_ref(T* out, const T* q, const T* k, const T* v, const T* g,
                                  const T* beta, const int32_t* cu_seqlens, int64_t num_docs,
                                  int64_t k_heads, int64_t v_heads, int64_t dk, int64_t dv,
                                  T scale);
// Recomputes the states of each (document, head) and runs the recurrence backwards.
template <typename T>
void gated_delta_rule_backward_ref(T* dq, T* dk_out, T* dv_out, T* dg, T* dbeta, const T* dout,
                                   const T* q, const T* k, const T* v, const T* g, const T* beta,
                                   const int32_t* cu_seqlens, int64_t num_docs, int64_t k_heads,
                                   int64_t v_heads, int64_t dk, int64_t dv, T scale);

}  // namespace deltatune
