// Hugging Face checkpoints of Qwen3.5 models: config.json plus model.safetensors or sharded
// model-0000x-of-0000y.safetensors with model.safetensors.index.json. Both tensor layouts load:
// the text-only `model.layers.*` and the published multimodal `model.language_model.*` with a
// top-level lm_head. The vision tower (model.visual.*) and the multi-token-prediction head (mtp.*)
// are not trained but carried through untouched, so an export of a multimodal base still loads
// as one. Saving writes the layout that was loaded, with every tensor in its stored dtype.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

enum class CheckpointLayout { kText, kMultimodal };

struct HfModel {
    Qwen35Config config;
    std::string config_json;  // config.json as read, written back verbatim on export
    CheckpointLayout layout = CheckpointLayout::kText;
    bool tied = false;
    ParamSet params;  // canonical text-layout names, fp32
    // Tensors carried from the base to the export as they are (model.visual.*, mtp.*): views of
    // the mapped files, by name.
    std::vector<std::pair<std::string, Tensor>> untouched;
};

// Loads config and weights (converted to fp32). Errors name the file and tensor: missing
// tensors (NotFound), shape or dtype mismatches (InvalidArgument), corrupt files (DataLoss),
// unsupported model types (Unimplemented).
absl::StatusOr<HfModel> load_hf_model(const std::string& dir);

// Name of a canonical parameter in the given layout ("model.X" -> "model.language_model.X").
std::string checkpoint_name(const std::string& canonical, CheckpointLayout layout);

// Writes config.json and the weights into `dir` (created if needed). Shards of at most
// `max_shard_bytes` each; more than one shard adds model.safetensors.index.json.
absl::Status save_hf_model(const std::string& dir, const HfModel& model,
                           size_t max_shard_bytes = 5ull << 30);

}  // namespace deltatune
