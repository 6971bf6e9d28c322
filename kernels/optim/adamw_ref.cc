// CPU reference for one AdamW step, operation for operation as torch.optim.AdamW's single-tensor
// path: the step scalars in double (as Python computes them), the tensor math in T.
#include <cmath>

#include "kernels/optim/adamw.h"

namespace deltatune {
namespace {

// torch.lerp(start, end, weight) switches formulas at |weight| = 0.5 for accuracy.
template <typename T>
T torch_lerp(T start, T end, T weight) {
    return std::abs(weight) < T(0.5) ? start + weight * (end - start)
                                     : end - (end - start) * (T(1) - weight);
}

}  // namespace

template <typename T>
void adamw_step_ref(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWHyper& hyper,
                    int64_t step) {
    const double bias_correction1 = 1.0 - std::pow(hyper.beta1, static_cast<double>(step));
    const double bias_correction2 = 1.0 - std::pow(hyper.beta2, static_cast<double>(step));
    // torch hands each Python scalar to the kernel, which rounds it to T once.
    const T decay = T(1.0 - hyper.lr * hyper.weight_decay);
    const T m_weight = T(1.0 - hyper.beta1);
    const T beta2 = T(hyper.beta2);
    const T one_minus_beta2 = T(1.0 - hyper.beta2);
    const T bias_correction2_sqrt = T(std::sqrt(bias_correction2));
    const T eps = T(hyper.eps);
    const T neg_step_size = T(-(hyper.lr / bias_correction1));
    for (int64_t i = 0; i < n; ++i) {
        param[i] = param[i] * decay;
        m[i] = torch_lerp(m[i], grad[i], m_weight);
        v[i] = v[i] * beta2;
        v[i] = v[i] + one_minus_beta2 * grad[i] * grad[i];
        const T denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
        // addcdiv_(m, denom, value=-step_size) evaluates param + value * m / denom.
        param[i] = param[i] + neg_step_size * m[i] / denom;
    }
}

template void adamw_step_ref<float>(float*, float*, float*, const float*, int64_t,
                                    const AdamWHyper&, int64_t);
template void adamw_step_ref<double>(double*, double*, double*, const double*, int64_t,
                                     const AdamWHyper&, int64_t);

}  // namespace deltatune
