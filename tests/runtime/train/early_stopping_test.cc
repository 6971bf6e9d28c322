// Early stopping's verdicts on a sequence of eval losses.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "runtime/train/early_stopping.h"

namespace deltatune {
namespace {

TEST_CASE("the best eval loss, improvements past min_delta, and patience", "[train]") {
    const EarlyStoppingConfig cfg{2, 0.01};
    EarlyStoppingState st;
    CHECK(observe_eval(cfg, st, 10, 2.0) == EvalVerdict::kBest);  // the first is the best so far
    CHECK(observe_eval(cfg, st, 20, 1.995) == EvalVerdict::kNotBetter);  // within min_delta
    CHECK(st.evals_since_best == 1);
    CHECK(observe_eval(cfg, st, 30, 1.5) == EvalVerdict::kBest);
    CHECK(st.best_step == 30);
    CHECK(st.best_eval_loss == 1.5);
    CHECK(st.evals_since_best == 0);
    CHECK(observe_eval(cfg, st, 40, 1.6) == EvalVerdict::kNotBetter);
    CHECK(observe_eval(cfg, st, 50, NAN) == EvalVerdict::kStop);  // NaN never improves
    CHECK(st.best_step == 30);
}

TEST_CASE("a NaN first evaluation is not a best", "[train]") {
    EarlyStoppingState st;
    CHECK(observe_eval({3, 0}, st, 5, NAN) == EvalVerdict::kNotBetter);
    CHECK(st.best_step == 0);
    CHECK(observe_eval({3, 0}, st, 10, 4.0) == EvalVerdict::kBest);
}

}  // namespace
}  // namespace deltatune
