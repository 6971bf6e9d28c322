#include "runtime/model/model_flops.h"

namespace deltatune {

double step_flops(const Qwen35Config& c, const std::vector<int64_t>& docs, int64_t adapter_params) {
    const double H = static_cast<double>(c.hidden_size),
                 I = static_cast<double>(c.intermediate_size);
    double T = 0, sq = 0;
    for (int64_t s : docs) T += static_cast<double>(s), sq += static_cast<double>(s) * s;
    const double s_bar = sq / (2 * T);
    const double D = static_cast<double>(c.head_dim),
                 nq = static_cast<double>(c.num_attention_heads);
    const double nkv = static_cast<double>(c.num_key_value_heads);
    const double K = static_cast<double>(c.linear_key_head_dim);
    const double V = static_cast<double>(c.linear_value_head_dim);
    const double HV = static_cast<double>(c.linear_num_value_heads), C = 64;
    double n_mm = static_cast<double>(c.vocab_size) * H, extra = 0;
    for (LayerType t : c.layer_types) {
        n_mm += 3 * I * H;
        if (t == LayerType::kLinearAttention) {
            n_mm += static_cast<double>(c.conv_dim()) * H +
                    2 * static_cast<double>(c.value_dim()) * H + 2 * HV * H;
            extra += HV * ((6 * K * V + 5.25 * C * K + 4 * C * V) +
                           (16 * K * V + 18 * C * K + 10 * C * V + 4 * C * C));
        } else {
            n_mm += (2 * nq * D + 2 * nkv * D) * H + nq * D * H;
            extra += 12 * nq * D * s_bar;
        }
    }
    // A frozen base: forward and input gradient only (4N); the adapter's weights train (6N).
    const double base = adapter_params > 0 ? 4 : 6;
    return (base * n_mm + 6 * static_cast<double>(adapter_params) + extra) * T;
}

double dense_bf16_peak_flops(int sm_version) {
    switch (sm_version) {
        case 80:
            return 312e12;
        case 90:
            return 989.4e12;
        case 100:
            return 2250e12;
        default:
            return 0.0;
    }
}

}  // namespace deltatune
