// The three GEMMs of a bias-free linear layer (gemm.h's linear_forward / _backward_dx /
// _backward_dw) with FP8 operands: each operand quantised on the fly (kernels/tensor/fp8.h) into
// stream-ordered scratch, activations and weights in e4m3, gradients in e5m2 (their range), one
// power-of-two scale per row of every stored operand, then cuBLASLt's FP8 GEMM with per-row
// scales and fp32 accumulation. Outputs as the bf16 forms: y and dx bf16, dW fp32.
// The inner dimension of each form must be a multiple of 16 (in for y, out for dx; the token
// count of dW is zero-padded): fp8_linear_supported says whether a layer qualifies.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/device/device_context.h"

namespace deltatune {

// A GPU whose cuBLASLt scales FP8 operands per row (its outer-vector mode): Hopper (sm_90)
// alone; Ada takes per-tensor scales only and Blackwell block scales (MXFP8), neither built yet.
// Plain host logic: admission, the kernel report and the tests ask it too.
inline bool fp8_gpu_supported(int sm_version) {
    return sm_version == 90;
}
// On such a GPU, in and out multiples of 16.
bool fp8_linear_supported(int sm_version, int64_t in, int64_t out);
inline bool fp8_linear_supported(const DeviceContext& dev, int64_t in, int64_t out) {
    return fp8_linear_supported(dev.gpu().sm_version, in, out);
}

// y (rows, out) = x (rows, in) W^T; W (out, in).
absl::Status fp8_linear_forward(const DeviceContext& dev, void* y, const void* x, const void* w,
                                int64_t rows, int64_t in, int64_t out);
// dx (rows, in) = dy (rows, out) W (+= dx with `accumulate`).
absl::Status fp8_linear_backward_dx(const DeviceContext& dev, void* dx, const void* dy,
                                    const void* w, int64_t rows, int64_t in, int64_t out,
                                    bool accumulate);
// dW (out, in) = dy^T x (+= dW with `accumulate`), fp32.
absl::Status fp8_linear_backward_dw(const DeviceContext& dev, float* dw, const void* dy,
                                    const void* x, int64_t rows, int64_t in, int64_t out,
                                    bool accumulate);

}  // namespace deltatune
