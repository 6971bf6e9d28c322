// What a training checkpoint holds: every rank's shard of the fp32 master weights and AdamW
// moments (one safetensors file per rank, see ShardedOptimizer), and state.json with the step,
// tokens consumed, the data cursor, the world size and the parameter group layout. Written by all
// ranks into one temporary folder and committed by rank 0 through CheckpointWriter (atomic,
// checksummed); loading verifies the checksums first and reshards to the loader's world size.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/dist/communicator.h"
#include "runtime/model/param_set.h"
#include "runtime/train/checkpoint_store.h"
#include "runtime/train/sharded_optimizer.h"

namespace deltatune {

struct TrainState {
    int64_t step = 0;    // optimizer steps completed
    int64_t tokens = 0;  // real tokens consumed
    std::string data_cursor;
    double last_loss = 0;
};

// Collective: every rank calls it at the same step. A failure on any rank abandons the
// checkpoint on all of them.
absl::StatusOr<CheckpointInfo> save_train_state(const std::string& root, const TrainState& state,
                                                const ShardedOptimizer& optimizer,
                                                Communicator& comm);
// Collective: verifies and loads `checkpoint_dir` (written at any world size) into the
// optimizer's shard and the full `params`. DataLoss when a file fails its checksum;
// InvalidArgument when the checkpoint's parameter layout is not this model's.
absl::StatusOr<TrainState> load_train_state(const std::string& checkpoint_dir, ParamSet& params,
                                            ShardedOptimizer& optimizer);

}  // namespace deltatune
