// A full fine-tuning checkpoint's trained weights read straight from its rank files: where each
// parameter's fp32 master lies in the shards of either layout (CPU ranks' units, FsdpCpuParams;
// GPU ranks' aligned units, FsdpGpuParams), read and converted a piece at a time. What
// `deltatune export` writes, with neither the model nor the optimizer state in memory.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/train/train_state.h"

namespace deltatune {

struct CheckpointMasters {
    TrainState state;
    // Parameter i's master in model.params[i]'s stored dtype (save_hf_model's source). Holds the
    // rank files open; lives as long as this object.
    ParamBytes values;
};

// Verifies the checkpoint (checksums, then the parameter layout against `model`'s in either
// form) and maps its rank files. InvalidArgument when the layout is neither this model's CPU nor
// its GPU one (another model, or a LoRA adapter's state).
absl::StatusOr<CheckpointMasters> open_checkpoint_masters(const HfModel& model,
                                                          const std::string& checkpoint_dir);

}  // namespace deltatune
