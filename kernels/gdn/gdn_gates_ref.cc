// CPU reference for the Gated DeltaNet gates: beta = sigmoid(b) and the log decay
// g = -exp(A_log) * softplus(a + dt_bias), with torch's thresholded softplus.
#include <cmath>
#include <vector>

#include "kernels/gdn/gdn_gates.h"

namespace deltatune {
namespace {

template <typename T>
T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}

// torch.nn.functional.softplus(x, beta=1, threshold=20): linear above the threshold.
constexpr double kSoftplusThreshold = 20.0;

template <typename T>
T softplus(T x) {
    return x > T(kSoftplusThreshold) ? x : std::log1p(std::exp(x));
}

}  // namespace

template <typename T>
void gdn_gates_forward_ref(T* beta, T* g, const T* b, const T* a, const T* A_log, const T* dt_bias,
                           int64_t tokens, int64_t heads) {
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
            const int64_t n = t * heads + h;
            beta[n] = sigmoid(b[n]);
            g[n] = -std::exp(A_log[h]) * softplus(a[n] + dt_bias[h]);
        }
    }
}

template <typename T>
void gdn_gates_backward_ref(T* db, T* da, T* dA_log, T* ddt_bias, const T* dbeta, const T* dg,
                            const T* b, const T* a, const T* A_log, const T* dt_bias,
                            int64_t tokens, int64_t heads) {
    // The per-head parameter gradients sum over every token: in double whatever T is.
    std::vector<double> dA_log_acc(dA_log, dA_log + heads),
        ddt_bias_acc(ddt_bias, ddt_bias + heads);
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
            const int64_t n = t * heads + h;
            const T beta = sigmoid(b[n]);
            db[n] = dbeta[n] * beta * (T(1) - beta);
            const T x = a[n] + dt_bias[h];
            // softplus' = sigmoid below the threshold and exactly 1 on the linear branch.
            const T dsoftplus = x > T(kSoftplusThreshold) ? T(1) : sigmoid(x);
            const T decay = std::exp(A_log[h]);
            da[n] = dg[n] * (-decay) * dsoftplus;
            ddt_bias_acc[h] += da[n];
            // g is linear in exp(A_log), so dg/dA_log = g.
            dA_log_acc[h] += static_cast<double>(dg[n]) * (-decay * softplus(x));
        }
    }
    for (int64_t h = 0; h < heads; ++h) {
        dA_log[h] = static_cast<T>(dA_log_acc[h]);
        ddt_bias[h] = static_cast<T>(ddt_bias_acc[h]);
    }
}

template void gdn_gates_forward_ref<float>(float*, float*, const float*, const float*, const float*,
                                           const float*, int64_t, int64_t);
template void gdn_gates_forward_ref<double>(double*, double*, const double*, const double*,
                                            const double*, const double*, int64_t, int64_t);
template void gdn_gates_backward_ref<float>(float*, float*, float*, float*, const float*,
                                            const float*, const float*, const float*, const float*,
                                            const float*, int64_t, int64_t);
template void gdn_gates_backward_ref<double>(double*, double*, double*, double*, const double*,
                                             const double*, const double*, const double*,
                                             const double*, const double*, int64_t, int64_t);

}  // namespace deltatune
