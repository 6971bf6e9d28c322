// Training length and warmup from the spec and the packed plan.
#include "runtime/train/training_length.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace deltatune {
namespace {

// ceil(x), where x within a rounding error of an integer is that integer: 0.1 * 30 epochs-steps
// is 3, not 4.
int64_t ceil_count(double x) {
    const double nearest = std::round(x);
    if (std::fabs(x - nearest) <= 1e-9 * std::max(1.0, std::fabs(x))) {
        return static_cast<int64_t>(nearest);
    }
    return static_cast<int64_t>(std::ceil(x));
}

}  // namespace

int64_t optimizer_steps_per_epoch(int64_t micro_steps_per_epoch, int64_t grad_accum) {
    grad_accum = std::max<int64_t>(1, grad_accum);
    return (micro_steps_per_epoch + grad_accum - 1) / grad_accum;
}

absl::StatusOr<TrainingLength> training_length(const TrainingLengthSpec& spec,
                                               int64_t micro_steps_per_epoch, int64_t grad_accum) {
    const bool by_steps = spec.max_steps > 0, by_epochs = spec.num_epochs > 0;
    if (by_steps == by_epochs) {
        return absl::InvalidArgumentError(absl::StrCat("give one of max_steps (", spec.max_steps,
                                                       ") and num_epochs (", spec.num_epochs, ")"));
    }
    TrainingLength out;
    out.steps_per_epoch = optimizer_steps_per_epoch(micro_steps_per_epoch, grad_accum);
    if (by_steps) {
        out.max_steps = spec.max_steps;
    } else {
        // The micro-steps of num_epochs, whole optimizer steps of them (the last one may reach
        // into the next epoch's first batches).
        const int64_t micro =
            ceil_count(spec.num_epochs * static_cast<double>(micro_steps_per_epoch));
        out.max_steps = std::max<int64_t>(1, optimizer_steps_per_epoch(micro, grad_accum));
    }
    out.warmup_steps = spec.warmup_ratio > 0
                           ? ceil_count(spec.warmup_ratio * static_cast<double>(out.max_steps))
                           : spec.warmup_steps;
    if (out.warmup_steps < 0 || out.warmup_steps > out.max_steps) {
        return absl::InvalidArgumentError(absl::StrCat("warmup of ", out.warmup_steps,
                                                       " steps is longer than the run's ",
                                                       out.max_steps, " steps"));
    }
    return out;
}

}  // namespace deltatune
