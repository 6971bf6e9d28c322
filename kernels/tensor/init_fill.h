// Seeded random fill of fp32 device buffers from a counter-based hash (no cuRAND state): value i
// depends only on (seed, stream id, i), so a tensor's values do not depend on launch shape. Used
// to initialise large models directly on the device (`deltatune bench`). Not bitwise equal to
// init_qwen35_params (host mt19937_64); same distributions.
#pragma once

#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune {

enum class InitFill : uint8_t {
    kConstant,    // out = a
    kNormal,      // out = a * N(0, 1)
    kLogUniform,  // out = log(a + (b - a) * U(0, 1))
};

#if DELTATUNE_HAVE_CUDA
// Device pointer, any n >= 0. `stream_id` separates tensors sharing a seed. out[i] receives
// the tensor's value number first + i, so a rank can fill just its shard of a tensor with the
// values the whole tensor would have. Never synchronises.
cudaError_t init_fill_f32(float* out, int64_t n, InitFill kind, float a, float b, uint64_t seed,
                          uint64_t stream_id, cudaStream_t stream, int64_t first = 0);
#endif

}  // namespace deltatune
