// Early stopping on the eval loss: the best evaluation so far, and how many have come since
// without beating it by more than min_delta. The state lives in every checkpoint, so a resumed
// run stops where an uninterrupted one would.
#pragma once

#include <cstdint>

namespace deltatune {

struct EarlyStoppingConfig {
    int64_t patience = 0;  // evaluations without improvement before stopping; 0 = off
    double min_delta = 0;  // an improvement is a loss lower than the best by more than this
    bool enabled() const { return patience > 0; }
};

struct EarlyStoppingState {
    int64_t best_step = 0;  // 0: no evaluation yet
    double best_eval_loss = 0;
    int64_t evals_since_best = 0;
};

enum class EvalVerdict {
    kBest,       // the best so far: keep this step's checkpoint
    kNotBetter,  // patience left
    kStop,       // `patience` evaluations without improvement
};

// Records the evaluation of `step` and says what it means.
EvalVerdict observe_eval(const EarlyStoppingConfig& config, EarlyStoppingState& state, int64_t step,
                         double eval_loss);

}  // namespace deltatune
