// How long a run trains: a fixed number of optimizer steps, or num_epochs passes over the packed
// data; and its warmup, in steps or as a fraction of them. One rule for the trainer and for
// `deltatune pack-stats`, so the steps a preview promises are the steps a job runs.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace deltatune {

struct TrainingLengthSpec {
    int64_t max_steps = 0;  // > 0: this many optimizer steps
    double num_epochs = 0;  // > 0 (and max_steps 0): this many passes over the data
    int64_t warmup_steps = 0;
    double warmup_ratio = 0;  // > 0: warmup = ceil(ratio * max_steps), instead of warmup_steps
};

struct TrainingLength {
    int64_t max_steps = 0;
    int64_t warmup_steps = 0;
    int64_t steps_per_epoch = 0;  // optimizer steps of one epoch
};

// `micro_steps_per_epoch`: the packed plan's steps of one epoch (Packer::steps_in_epoch); an
// optimizer step takes `grad_accum` of them, crossing into the next epoch when one ends.
int64_t optimizer_steps_per_epoch(int64_t micro_steps_per_epoch, int64_t grad_accum);

// InvalidArgument naming the fields when neither or both lengths are given, or the warmup is
// longer than the run.
absl::StatusOr<TrainingLength> training_length(const TrainingLengthSpec& spec,
                                               int64_t micro_steps_per_epoch, int64_t grad_accum);

}  // namespace deltatune
