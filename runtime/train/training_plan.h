// The batches a job trains, in the trainer's order, as JSON lines, so that another trainer can be
// fed exactly them (the loss-curve comparison with the PyTorch peer). One line per micro-batch
// and data shard of every optimizer step:
//   {"step": S, "micro": M, "shard": R, "segments": [[doc, begin, end], ...],
//    "input_ids": [...], "labels": [...], "cu_seqlens": [...]}
// labels in the Hugging Face flattened convention (flattened_labels: a model that shifts them
// over the whole stream trains exactly this batch's targets); then, closing each step,
//   {"step": S, "batch_digest": D, "label_tokens": N}
// with the digest the job's STEP_METRICS report for that step.
#pragma once

#include <cstdint>
#include <ostream>

#include "absl/status/statusor.h"
#include "runtime/train/trainer.h"

namespace deltatune {

// Loads the job's training data as the trainer does (the model folder is only opened, for its
// vocabulary) and writes the plan of its whole run (max_steps, or num_epochs' steps) over
// `shards` data shards. Returns the steps written.
absl::StatusOr<int64_t> write_training_plan(const TrainConfig& c, int shards, std::ostream& out);

}  // namespace deltatune
