// `deltatune init-model`: a randomly initialised Hugging Face checkpoint from a config.json.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace deltatune {

enum class InitDevice {
    kHost,  // transformers' initialisation, init_qwen35_params' values (one host thread)
    kCuda,  // the same distributions from the device's counter-based generator: the values
            // `deltatune bench` trains for the same seed, at GPU speed (real-size models)
};

// Reads `config_path` (qwen3_5 or qwen3_5_text), initialises every parameter as transformers
// does (seeded), and writes config.json + safetensors into `out_dir` in the config's layout
// (multimodal names for qwen3_5) and the config's dtype. Tied iff the config says
// tie_word_embeddings. Streams tensor by tensor: host memory is the largest tensor (host) or a
// bounded piece (cuda), not the model. kCuda in a build without CUDA: FailedPrecondition.
absl::Status init_model(const std::string& config_path, const std::string& out_dir, uint64_t seed,
                        InitDevice device = InitDevice::kHost);

}  // namespace deltatune
