#include <algorithm>

#include "kernels/optim/shard_reduce.h"

namespace deltatune {

void accumulate_f32_ref(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

float clip_coef_ref(float norm, float max_norm) {
    if (max_norm <= 0) return 1.0f;
    return std::min(1.0f, max_norm / (norm + 1e-6f));
}

}  // namespace deltatune
