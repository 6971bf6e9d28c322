// What a training checkpoint holds for one rank: fp32 master weights, AdamW moments and step,
// the optimizer step, tokens consumed and the data cursor. Saved through CheckpointWriter
// (atomic, checksummed); loading verifies the checksums first.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/model/param_set.h"
#include "runtime/optim/adamw.h"
#include "runtime/train/checkpoint_store.h"

namespace deltatune {

struct TrainState {
    int64_t step = 0;    // optimizer steps completed
    int64_t tokens = 0;  // real tokens consumed
    std::string data_cursor;
    double last_loss = 0;
};

absl::StatusOr<CheckpointInfo> save_train_state(const std::string& root, const TrainState& state,
                                                const ParamSet& params, const AdamWState& adam);
// Verifies and loads `checkpoint_dir` into params and adam (shapes must match: InvalidArgument
// naming the tensor otherwise). DataLoss when a file fails its checksum.
absl::StatusOr<TrainState> load_train_state(const std::string& checkpoint_dir, ParamSet& params,
                                            AdamWState& adam);

}  // namespace deltatune
