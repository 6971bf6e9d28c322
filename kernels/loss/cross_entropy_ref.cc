// CPU reference for row-wise cross-entropy with ignore_index -100; loss = lse - logit[target], as
// torch's CPU log_softmax forms it.
#include <cmath>

#include "kernels/loss/cross_entropy.h"

namespace deltatune {

template <typename T>
void cross_entropy_forward_ref(T* losses, T* lse, const T* logits, const int32_t* targets,
                               int64_t rows, int64_t vocab) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* x = logits + r * vocab;
        T max_logit = x[0];
        for (int64_t c = 1; c < vocab; ++c) {
            max_logit = x[c] > max_logit ? x[c] : max_logit;
        }
        double sum = 0;  // over the vocabulary: in double whatever T is
        for (int64_t c = 0; c < vocab; ++c) {
            sum += std::exp(x[c] - max_logit);
        }
        // Saved for every row (ignored ones too) so the buffer is never left unwritten.
        lse[r] = static_cast<T>(std::log(sum) + max_logit);
        losses[r] = targets[r] == kIgnoreIndex ? T(0) : lse[r] - x[targets[r]];
    }
}

template <typename T>
void cross_entropy_backward_ref(T* dlogits, const T* logits, const T* lse, const int32_t* targets,
                                int64_t rows, int64_t vocab, T grad_scale) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* x = logits + r * vocab;
        T* dx = dlogits + r * vocab;
        if (targets[r] == kIgnoreIndex) {
            for (int64_t c = 0; c < vocab; ++c) {
                dx[c] = 0;
            }
            continue;
        }
        for (int64_t c = 0; c < vocab; ++c) {
            dx[c] = grad_scale * std::exp(x[c] - lse[r]);
        }
        dx[targets[r]] -= grad_scale;
    }
}

template void cross_entropy_forward_ref<float>(float*, float*, const float*, const int32_t*,
                                               int64_t, int64_t);
template void cross_entropy_forward_ref<double>(double*, double*, const double*, const int32_t*,
                                                int64_t, int64_t);
template void cross_entropy_backward_ref<float>(float*, const float*, const float*, const int32_t*,
                                                int64_t, int64_t, float);
template void cross_entropy_backward_ref<double>(double*, const double*, const double*,
                                                 const int32_t*, int64_t, int64_t, double);

}  // namespace deltatune
