// The small device ops sharded training needs between its collectives, so that nothing waits on
// the host: adding a reduce-scattered gradient shard into the shard's accumulator, and turning
// per-rank squared gradient norms (after an all-reduce) into the global norm and
// torch.nn.utils.clip_grad_norm_'s coefficient.
#pragma once

#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune {

// CPU references.
void accumulate_f32_ref(float* y, const float* x, int64_t n);  // y += x
// min(1, max_norm / (norm + 1e-6)) as torch computes it (fp32); 1 when max_norm <= 0.
float clip_coef_ref(float norm, float max_norm);

#if DELTATUNE_HAVE_CUDA
// y[i] += x[i]; device pointers, any n >= 0. Never synchronises.
cudaError_t accumulate_f32(float* y, const float* x, int64_t n, cudaStream_t stream);
// out = a^2 + (b ? b^2 : 0): one rank's share of the squared global norm from the norm of its
// gradient shard (a) and, on one rank only, of the replicated gradients (b). (1) device fp32 each.
cudaError_t grad_norm_square_sum(float* out, const float* a, const float* b, cudaStream_t stream);
// norm = sqrt(sum_sq); clip_coef (may be null) = clip_coef_ref(norm, max_norm).
cudaError_t grad_norm_from_square(float* norm, float* clip_coef, const float* sum_sq,
                                  float max_norm, cudaStream_t stream);
#endif

}  // namespace deltatune
