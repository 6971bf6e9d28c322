// AdamW over ParamSets.
#include "runtime/optim/adamw.h"

namespace deltatune {

AdamWState make_adamw_state(const ParamSet& params) {
    return AdamWState{params.zeros_like(), params.zeros_like(), 0};
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
