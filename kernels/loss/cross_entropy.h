// Cross-entropy over rows of logits with ignore_index -100 (transformers' ForCausalLMLoss after the
// shift: the caller passes per-row targets). Softmax math in the template type.
// Gradient contract: dlogits is written (=), zero on ignored rows.
#pragma once
#include <cstdint>

namespace deltatune {

inline constexpr int32_t kIgnoreIndex = -100;

// logits: (rows, vocab); targets: (rows), kIgnoreIndex or in [0, vocab).
// losses: (rows) per-row -log softmax[target] (0 where ignored); lse: (rows) saved for backward.
template <typename T>
void cross_entropy_forward_ref(T* losses, T* lse, const T* logits, const int32_t* targets,
                               int64_t rows, int64_t vocab);
// dlogits = grad_scale * (softmax(logits) - onehot(target)) on non-ignored rows, 0 elsewhere.
template <typename T>
void cross_entropy_backward_ref(T* dlogits, const T* logits, const T* lse, const int32_t* targets,
                                int64_t rows, int64_t vocab, T grad_scale);

}  // namespace deltatune
