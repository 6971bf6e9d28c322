// Early stopping's bookkeeping.
#include "runtime/train/early_stopping.h"

#include <cmath>

namespace deltatune {

EvalVerdict observe_eval(const EarlyStoppingConfig& config, EarlyStoppingState& state, int64_t step,
                         double eval_loss) {
    // A NaN loss never improves on anything.
    const bool first = state.best_step == 0 && std::isfinite(eval_loss);
    if (first || eval_loss < state.best_eval_loss - config.min_delta) {
        state.best_step = step;
        state.best_eval_loss = eval_loss;
        state.evals_since_best = 0;
        return EvalVerdict::kBest;
    }
    ++state.evals_since_best;
    return config.enabled() && state.evals_since_best >= config.patience ? EvalVerdict::kStop
                                                                         : EvalVerdict::kNotBetter;
}

}  // namespace deltatune
