// What a training checkpoint needs of a rank's sharded optimizer state (runtime/train/
// train_state.h saves and loads it): the CPU path's FsdpCpuParams or ShardedOptimizer and the GPU
// engine each provide one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace deltatune {

struct ShardedStateIo {
    std::vector<int64_t> group_sizes;  // the parameter layout, checked on load
    int64_t adam_step = 0;             // AdamW steps taken (saved)
    // Writes this rank's shard file (a path inside the checkpoint).
    std::function<absl::Status(const std::string& path)> save_shard;
    // Loads this rank's shard from the files of saved ranks 0..W-1 and the saved AdamW step.
    std::function<absl::Status(const std::vector<std::string>& rank_files, int64_t adam_step)> load;
};

}  // namespace deltatune
