// The Qwen3.5 text-model configuration, parsed from a Hugging Face config.json of model_type
// "qwen3_5" (multimodal wrapper, text_config nested) or "qwen3_5_text" (flat). Unknown model
// types and inconsistent head counts are rejected with the file and field in the message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/tensor/dtype.h"

namespace deltatune {

enum class LayerType : uint8_t { kLinearAttention, kFullAttention };

struct Qwen35Config {
    std::string model_type;  // as written in the file: "qwen3_5" or "qwen3_5_text"
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;             // H
    int64_t intermediate_size = 0;       // I (SwiGLU width)
    int64_t num_layers = 0;              // L
    int64_t num_attention_heads = 0;     // Hq
    int64_t num_key_value_heads = 0;     // Hkv
    int64_t head_dim = 0;                // D of full attention
    int64_t linear_num_key_heads = 0;    // Hk
    int64_t linear_num_value_heads = 0;  // Hv
    int64_t linear_key_head_dim = 0;     // dk
    int64_t linear_value_head_dim = 0;   // dv
    int64_t linear_conv_kernel_dim = 0;  // K
    double rms_norm_eps = 1e-6;
    double rope_theta = 1e7;
    double partial_rotary_factor = 0.25;
    double initializer_range = 0.02;
    // Whether the config asks for tied embeddings (for "qwen3_5" the top-level flag decides, as
    // in transformers). The checkpoint's tensor list must agree (see hf_model_io).
    bool tie_word_embeddings = false;
    DType dtype = DType::kBF16;  // "dtype" / "torch_dtype" of the checkpoint
    std::vector<LayerType> layer_types;

    int64_t key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
    int64_t value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
    int64_t rotary_dim() const { return static_cast<int64_t>(head_dim * partial_rotary_factor); }
    bool is_multimodal() const { return model_type == "qwen3_5"; }
};

// `source` names the file in error messages.
absl::StatusOr<Qwen35Config> parse_qwen35_config(const std::string& json_text,
                                                 const std::string& source);
absl::StatusOr<Qwen35Config> load_qwen35_config(const std::string& path);

}  // namespace deltatune
