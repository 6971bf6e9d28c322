// Partial rotate-half (NeoX) RoPE as Qwen3.5 uses it: in each head only channels [0, rotary_dim)
// rotate; channel i pairs with i + rotary_dim/2 and both use inv_freq[i] = theta^(-2i/rotary_dim).
//   x' = x * cos + rotate_half(x) * sin,  rotate_half(x1, x2) = (-x2, x1).
// cos/sin follow transformers' fp32 recipe when T = float (so fp32 parity is tight).
#pragma once
#include <cstdint>

namespace deltatune {

// x: (tokens, heads, head_dim), rotated in place; positions: (tokens), restarting per document.
template <typename T>
void rope_forward_ref(T* x, const int32_t* positions, int64_t tokens, int64_t heads,
                      int64_t head_dim, int64_t rotary_dim, double theta);
// The transpose of the forward rotation, in place: dx = R^T dy on the rotated channels.
template <typename T>
void rope_backward_ref(T* dx, const int32_t* positions, int64_t tokens, int64_t heads,
                       int64_t head_dim, int64_t rotary_dim, double theta);

}  // namespace deltatune
