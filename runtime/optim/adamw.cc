// AdamW over ParamSets.
#include "runtime/optim/adamw.h"

#include <cmath>

namespace deltatune {

AdamWState make_adamw_state(const ParamSet& params) {
    return AdamWState{params.zeros_like(), params.zeros_like(), 0};
}

double global_norm(const ParamSet& grads) {
    double sq = 0;
    for (const auto& g : grads.all()) {
        const float* d = g.value.data<float>();
        for (int64_t i = 0; i < g.value.numel(); ++i) sq += static_cast<double>(d[i]) * d[i];
    }
    return std::sqrt(sq);
}

void update_from_fresh_state(ParamSet& params, const ParamSet& grads, const AdamWHyper& hyper) {
    AdamWState state = make_adamw_state(params);
    adamw_update(params, grads, state, hyper);
}

void adamw_update(ParamSet& params, const ParamSet& grads, AdamWState& state,
                  const AdamWHyper& hyper) {
    ++state.step;
    auto& p = params.all();
    for (size_t i = 0; i < p.size(); ++i) {
        const Tensor& g = grads.get(p[i].name);
        adamw_step_ref(p[i].value.data<float>(), state.m.get(p[i].name).data<float>(),
                       state.v.get(p[i].name).data<float>(), g.data<float>(), p[i].value.numel(),
                       hyper, state.step);
    }
}

}  // namespace deltatune
