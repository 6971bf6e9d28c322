// AdamW, exactly torch.optim.AdamW's single-tensor update (decoupled weight decay, bias
// correction with the step count starting at 1).
#pragma once
#include <cstdint>

namespace deltatune {

struct AdamWHyper {
    double lr = 1e-5;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
};

// One step on n values. param, m, v are updated in place; step is the 1-based step number.
template <typename T>
void adamw_step_ref(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWHyper& hyper,
                    int64_t step);

}  // namespace deltatune
