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

}  // namespace deltatune
