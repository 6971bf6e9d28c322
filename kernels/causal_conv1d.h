// Depthwise causal conv1d + SiLU over packed documents (the Gated DeltaNet's q/k/v mixing):
//   out[t, c] = silu(sum_j w[c, j] * x[t - (K-1) + j, c]),
// where x before the start of t's document counts as 0, so the window never crosses a boundary.
// Gradient contract: dx is written (=), dw is accumulated (+=).
#pragma once
#include <cstdint>

namespace deltatune {

// x, out: (tokens, channels) token-major; w: (channels, K) (HF conv1d.weight [C, 1, K]);
// cu_seqlens: (num_docs + 1), tokens = cu_seqlens[num_docs].
template <typename T>
void causal_conv1d_forward_ref(T* out, const T* x, const T* w, const int32_t* cu_seqlens,
                               int64_t num_docs, int64_t channels, int64_t kernel);
template <typename T>
void causal_conv1d_backward_ref(T* dx, T* dw, const T* dout, const T* x, const T* w,
                                const int32_t* cu_seqlens, int64_t num_docs, int64_t channels,
                                int64_t kernel);

}  // namespace deltatune
