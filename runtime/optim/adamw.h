// AdamW over whole ParamSets on the CPU (fp32 master weights and moments), through the
// kernels/adamw reference. Every parameter is decayed, as torch.optim.AdamW does with one group.
#pragma once

#include <cstdint>

#include "kernels/optim/adamw.h"
#include "runtime/model/param_set.h"

namespace deltatune {

struct AdamWState {
    ParamSet m;  // first moments, shaped like the parameters
    ParamSet v;  // second moments
    int64_t step = 0;
};

AdamWState make_adamw_state(const ParamSet& params);
// Applies one step (state.step is incremented first, so the first step uses step = 1).
void adamw_update(ParamSet& params, const ParamSet& grads, AdamWState& state,
                  const AdamWHyper& hyper);

}  // namespace deltatune
