// One optimizer step as a job takes it, in one place: the trainer (trainer.cc) calls it for every
// step and the benchmark (benchmark.h) times it, so what `deltatune bench` measures is what a job
// runs.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/train/train_engine.h"  // TrainEngine, and AdamWHyper for its apply

namespace deltatune {

struct StepResult {
    double loss_sum = 0;   // the step's loss sum over every rank's micro-batches
    double grad_norm = 0;  // the global gradient norm before clipping
};

// begin_step, then forward and backward of each of this rank's micro-batches (the gradient of
// loss_sum / `global_labels`, the trained targets of the whole step over all ranks), the loss
// sum all-reduced over the ranks (engine.comm()), and the update: apply(hyper, max_grad_norm),
// hyper.lr being the step's. A NaN or infinite loss stops before the update and a non-finite
// norm after it, both FailedPrecondition "NON_FINITE: step `step`: ...": the caller keeps its
// last checkpoint rather than train on with poisoned weights. Collective: every rank calls it
// with as many micro-batches.
absl::StatusOr<StepResult> run_train_step(TrainEngine& engine, std::span<const PackedBatch> micro,
                                          int64_t global_labels, const AdamWHyper& hyper,
                                          double max_grad_norm, int64_t step);

}  // namespace deltatune
