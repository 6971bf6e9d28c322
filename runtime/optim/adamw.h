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
// The L2 norm of every value of `grads` (squares summed in fp64).
double global_norm(const ParamSet& grads);
// One step from fresh (zero) moments: what a single step of a new optimizer does.
void update_from_fresh_state(ParamSet& params, const ParamSet& grads, const AdamWHyper& hyper);
// Applies one step (state.step is incremented first, so the first step uses step = 1).
void adamw_update(ParamSet& params, const ParamSet& grads, AdamWState& state,
                  const AdamWHyper& hyper);

}  // namespace deltatune
