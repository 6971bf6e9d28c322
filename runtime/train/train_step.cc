// One optimizer step (train_step.h): micro-batches, the ranks' loss sum, the finiteness checks
// around the update.
#include "runtime/train/train_step.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"

namespace deltatune {

namespace {

absl::Status check_finite(const char* what, double value, int64_t step) {
    if (std::isfinite(value)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "NON_FINITE: step ", step, ": the ", what, " is ", value,
        "; the update was not applied past it and no checkpoint or export holds it (lower "
        "hyperparameters.learning_rate, or check the data)"));
}

}  // namespace

absl::StatusOr<StepResult> run_train_step(TrainEngine& engine, std::span<const PackedBatch> micro,
                                          int64_t global_labels, const AdamWHyper& hyper,
                                          double max_grad_norm, int64_t step) {
    StepResult r;
    DT_RETURN_IF_ERROR(engine.begin_step());
    for (size_t m = 0; m < micro.size(); ++m) {
        DT_ASSIGN_OR_RETURN(const double sum, engine.forward_backward(micro[m], global_labels,
                                                                      m + 1 == micro.size()));
        r.loss_sum += sum;
    }
    DT_RETURN_IF_ERROR(engine.comm().all_reduce_sum(&r.loss_sum, 1));
    // A NaN or infinite loss would poison the weights: stop before the update.
    DT_RETURN_IF_ERROR(check_finite("loss", r.loss_sum, step));
    DT_ASSIGN_OR_RETURN(r.grad_norm, engine.apply(hyper, max_grad_norm));
    DT_RETURN_IF_ERROR(check_finite("gradient norm", r.grad_norm, step));
    return r;
}

}  // namespace deltatune
