// Linear layer without bias, PyTorch weight layout: y = x W^T with W: (out_features, in_features).
// Gradient contract: dx is written (=), dw is accumulated (+=). Either may be null to skip it.
#pragma once
#include <cstdint>

namespace deltatune {

// x: (rows, in_features); w: (out_features, in_features); y: (rows, out_features).
template <typename T>
void linear_forward_ref(T* y, const T* x, const T* w, int64_t rows, int64_t in_features,
                        int64_t out_features);
template <typename T>
void linear_backward_ref(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t rows,
                         int64_t in_features, int64_t out_features);

// A LoRA branch beside that layer (PEFT's, dropout 0): y += scale (x A^T) B^T with A: (rank,
// in_features), B: (out_features, rank).
template <typename T>
void lora_forward_ref(T* y, const T* x, const T* a, const T* b, int64_t rows, int64_t in_features,
                      int64_t out_features, int64_t rank, T scale);
// Its backward, every output accumulated (+=): dx += scale (dy B) A, dA += scale (dy B)^T x,
// dB += scale dy^T (x A^T). Any of dx, da, db may be null to skip it.
template <typename T>
void lora_backward_ref(T* dx, T* da, T* db, const T* dy, const T* x, const T* a, const T* b,
                       int64_t rows, int64_t in_features, int64_t out_features, int64_t rank,
                       T scale);

}  // namespace deltatune
