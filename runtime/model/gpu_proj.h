// The projections of the GPU blocks (y = x W^T, bias-free) through cuBLASLt, in FP8 where
// GpuParam::fp8 and the shape allow (runtime/device/linear_fp8.h), with the LoRA branch
// y += scale (x A^T) B^T (bf16) where the parameter carries an adapter (gpu_lora.h), and no weight
// gradient where the base is frozen (GpuParam::grad null). Rows are the batch's tokens.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include "absl/status/status.h"
#include "runtime/model/gpu_blocks.h"

namespace deltatune {

// y (T, out) = in (T, in) W^T, plus the adapter's branch. The adapted projections that share an
// input (gpu_lora.h's groups) must run their forwards in the group's order, the first computing
// every member's x A^T, and each member's backward once after its forward.
absl::Status proj_forward(const GpuCtx& x, const GpuParam& p, void* y, const void* in,
                          int64_t in_dim, int64_t out_dim);
// dx (T, in) = dy W (+= with `accumulate`), plus the adapter's branch; with an adapter also its
// dB (+=), and, at the group's last member, the group's dx += (dy B) A and dA (+=), which need
// the forward input `in`.
absl::Status proj_backward_dx(const GpuCtx& x, const GpuParam& p, void* dx, const void* dy,
                              const void* in, int64_t in_dim, int64_t out_dim, bool accumulate);
// dW += dy^T in (written when GpuParam::fresh); nothing for a frozen weight.
absl::Status proj_backward_dw(const GpuCtx& x, const GpuParam& p, const void* dy, const void* in,
                              int64_t in_dim, int64_t out_dim);

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
