// Gated full attention core: causal softmax attention over packed documents (varlen, each token
// attends only to earlier tokens of its own document), GQA (query head h reads kv head h / G,
// G = q_heads / kv_heads), then the sigmoid output gate y = o * sigmoid(gate).
// Gradient contract: all gradients are written (=).
#pragma once
#include <cstdint>

namespace deltatune {

// q: (tokens, q_heads, head_dim); k, v: (tokens, kv_heads, head_dim); out: (tokens, q_heads,
// head_dim); lse: (tokens, q_heads) log-sum-exp of the scaled scores, saved for backward.
// cu_seqlens: (num_docs + 1) document starts, cu_seqlens[0] = 0, last = tokens.
template <typename T>
void attention_forward_ref(T* out, T* lse, const T* q, const T* k, const T* v,
                           const int32_t* cu_seqlens, int64_t num_docs, int64_t q_heads,
                           int64_t kv_heads, int64_t head_dim, T scale);
template <typename T>
void attention_backward_ref(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                            const T* out, const T* lse, const int32_t* cu_seqlens, int64_t num_docs,
                            int64_t q_heads, int64_t kv_heads, int64_t head_dim, T scale);

// y = o * sigmoid(gate), elementwise over n values.
template <typename T>
void output_gate_forward_ref(T* y, const T* o, const T* gate, int64_t n);
template <typename T>
void output_gate_backward_ref(T* d_o, T* dgate, const T* dy, const T* o, const T* gate, int64_t n);

}  // namespace deltatune
