// Random initialisation of a Qwen3.5 checkpoint.
#include "runtime/model/init_model.h"

#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/qwen35_params.h"

namespace deltatune {

absl::Status init_model(const std::string& config_path, const std::string& out_dir, uint64_t seed) {
    HfModel m;
    DT_ASSIGN_OR_RETURN(m.config_json, read_file(config_path));
    DT_ASSIGN_OR_RETURN(m.config, parse_qwen35_config(m.config_json, config_path));
    m.layout = m.config.is_multimodal() ? CheckpointLayout::kMultimodal : CheckpointLayout::kText;
    m.tied = m.config.tie_word_embeddings;
    m.params = make_qwen35_params(m.config, m.tied);
    init_qwen35_params(m.config, m.params, seed);
    return save_hf_model(out_dir, m);
}

}  // namespace deltatune
