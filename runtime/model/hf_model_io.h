// Hugging Face checkpoints of Qwen3.5 models: config.json plus model.safetensors or sharded
// model-0000x-of-0000y.safetensors with model.safetensors.index.json. Both tensor layouts load:
// the text-only `model.layers.*` and the published multimodal `model.language_model.*` with a
// top-level lm_head. The vision tower (model.visual.*) and the multi-token-prediction head (mtp.*)
// are not trained but carried through untouched, so an export of a multimodal base still loads
// as one. Saving writes the layout that was loaded, with every tensor in its stored dtype.
//
// Neither direction needs the model in host memory: open_hf_model checks a checkpoint and keeps
// its files mapped (CheckpointWeights), from which a rank copies just the byte ranges it holds;
// save_hf_model takes each tensor's bytes from a callback, piece by piece, into shard files.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

enum class CheckpointLayout { kText, kMultimodal };
struct HfModel;

// The weights of an opened checkpoint, read in their stored dtype straight from its files
// (mapped; the pages read are given back to the page cache, so ranks of a node share it).
class CheckpointWeights {
  public:
    // Elements [first, last) of parameter `param` (ParamSet order) in its stored dtype into
    // `dst` ((last - first) * dtype_size bytes).
    absl::Status copy(size_t param, int64_t first, int64_t last, void* dst) const;
    // Elements [first, last) of parameter `param` as fp32, converted through a bounded buffer.
    absl::Status copy_f32(size_t param, int64_t first, int64_t last, float* dst) const;
    DType dtype(size_t param) const { return params_[param].dtype; }
    int64_t numel(size_t param) const { return params_[param].numel; }
    size_t size() const { return params_.size(); }

  private:
    friend absl::StatusOr<HfModel> open_hf_model(const std::string& dir);
    struct Param {
        const SafetensorsFile* file = nullptr;
        std::string name;  // in the file
        DType dtype = DType::kBF16;
        int64_t numel = 0;
    };
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::vector<Param> params_;
};

struct HfModel {
    Qwen35Config config;
    std::string config_json;  // config.json as read, written back verbatim on export
    CheckpointLayout layout = CheckpointLayout::kText;
    bool tied = false;
    // Canonical text-layout names, shapes and stored dtypes. The fp32 values exist only once
    // `materialized` (load_hf_model, materialize_weights, or a model built in memory); before,
    // the tensors are unwritten address space and the values are read through `weights`.
    ParamSet params;
    bool materialized = true;
    std::shared_ptr<const CheckpointWeights> weights;  // null for a model built in memory
    // Tensors carried from the base to the export as they are (model.visual.*, mtp.*): views of
    // the mapped files, by name.
    std::vector<std::pair<std::string, Tensor>> untouched;
};

// Checks config and checkpoint (every tensor present, with the shape and a float dtype the
// config implies; nothing unexpected) without reading a weight. Errors name the file and tensor:
// missing tensors (NotFound), shape or dtype mismatches (InvalidArgument), corrupt files
// (DataLoss), unsupported model types (Unimplemented).
absl::StatusOr<HfModel> open_hf_model(const std::string& dir);
// Reads every weight into model.params as fp32 (the CPU engine's full copy).
absl::Status materialize_weights(HfModel& model);
// open_hf_model, then materialize_weights.
absl::StatusOr<HfModel> load_hf_model(const std::string& dir);

// Name of a canonical parameter in the given layout ("model.X" -> "model.language_model.X").
std::string checkpoint_name(const std::string& canonical, CheckpointLayout layout);

// Parameter `param`'s values (ParamSet order), in its stored dtype, passed to `write` in pieces.
using ParamBytes = std::function<absl::Status(size_t param, const SafetensorsWrite& write)>;
// Writes n fp32 values as `dtype` (a float type), converted a bounded piece at a time (F32: as
// they are).
absl::Status write_f32_as(DType dtype, const float* values, int64_t n,
                          const SafetensorsWrite& write);
// The values of materialized fp32 params, converted a bounded piece at a time.
ParamBytes param_bytes_of(const ParamSet& params);

struct SaveOptions {
    size_t max_shard_bytes = 5ull << 30;
    // False on the ranks that only take part: `values` is still called for every parameter in
    // the same order (it may hold collectives), but nothing is written.
    bool write_files = true;
};

// Writes config.json and the weights into `dir` (created if needed), the parameters' bytes from
// `values` in ParamSet order, then the untouched tensors. Shards of at most max_shard_bytes each;
// more than one shard adds model.safetensors.index.json. Host memory: what `values` holds.
absl::Status save_hf_model(const std::string& dir, const HfModel& model, const ParamBytes& values,
                           const SaveOptions& options = {});
// The same from model.params (materialized).
absl::Status save_hf_model(const std::string& dir, const HfModel& model,
                           size_t max_shard_bytes = 5ull << 30);

}  // namespace deltatune
