// `deltatune init-model`: a randomly initialised Hugging Face checkpoint from a config.json.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace deltatune {

// Reads `config_path` (qwen3_5 or qwen3_5_text), initialises every parameter as transformers
// does (seeded), and writes config.json + safetensors into `out_dir` in the config's layout
// (multimodal names for qwen3_5). Tied iff the config says tie_word_embeddings.
absl::Status init_model(const std::string& config_path, const std::string& out_dir, uint64_t seed);

}  // namespace deltatune
