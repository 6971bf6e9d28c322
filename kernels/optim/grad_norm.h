// Global gradient norm over many tensors, deterministic: a fixed chunking (multi_tensor.h), one
// fp32 sum of squares per chunk, then one block summing the chunk partials in double in a fixed
// order. Optionally writes torch.nn.utils.clip_grad_norm_'s coefficient min(1, max / (norm +
// 1e-6)).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/optim/multi_tensor.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune {

#if DELTATUNE_HAVE_CUDA
struct GradNormTensor {
    const float* grad;  // device, fp32
    int64_t n;
    int64_t chunk_begin;  // filled by grad_norm_plan_chunks
    RowMask rows = {};    // gradient rows known to be zero, not read (optional; row_mask_valid)
};

int64_t grad_norm_plan_chunks(GradNormTensor* tensors, int num_tensors);
size_t grad_norm_workspace_bytes(int64_t total_chunks);
// norm: (1) device fp32; clip_coef: (1) device fp32 or null. `tensors` is a device copy of the
// planned array.
cudaError_t global_grad_norm(float* norm, float* clip_coef, const GradNormTensor* tensors,
                             int num_tensors, int64_t total_chunks, float max_norm, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream);
#endif

}  // namespace deltatune
