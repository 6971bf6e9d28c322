// What a training checkpoint holds: every rank's shard of the fp32 master weights and AdamW
// moments (one safetensors file per rank: FsdpCpuParams' on CPU ranks, ShardedOptimizer's for a
// CPU LoRA adapter, FsdpGpuParams' on GPU ranks, all through ShardedStateIo), and state.json with
// the step, tokens consumed, the data cursor, the world size and the parameter group layout.
// Written by all ranks into one temporary folder and committed by rank 0 through CheckpointWriter
// (atomic, checksummed); loading verifies the checksums first and reshards to the loader's world
// size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/checkpoint/sharded_state_io.h"
#include "runtime/distributed/communicator.h"
#include "runtime/model/param_set.h"
#include "runtime/train/checkpoint_store.h"
#include "runtime/train/early_stopping.h"

namespace deltatune {

struct TrainState {
    int64_t step = 0;    // optimizer steps completed
    int64_t tokens = 0;  // real tokens consumed
    std::string data_cursor;
    double last_loss = 0;
    EarlyStoppingState early_stopping;  // the best evaluation so far
};

// "shard-R-of-W.safetensors": rank R's file in a checkpoint written at world size W.
std::string shard_file_name(int rank, int world);

// Collective: every rank calls it at the same step. A failure on any rank abandons the
// checkpoint on all of them.
absl::StatusOr<CheckpointInfo> save_train_state(const std::string& root, const TrainState& state,
                                                const ShardedStateIo& io, Communicator& comm);
// Collective: verifies `checkpoint_dir` (written at any world size) and loads it through `io`.
// DataLoss when a file fails its checksum; InvalidArgument when the checkpoint's parameter
// layout is not this model's.
absl::StatusOr<TrainState> load_train_state(const std::string& checkpoint_dir,
                                            const ShardedStateIo& io);

}  // namespace deltatune
