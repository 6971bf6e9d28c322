// config.json -> Qwen35Config, with the defaults and derivations transformers 5.x applies
// (layer_types from full_attention_interval, rope_parameters or legacy rope_theta, nested
// text_config for the multimodal wrapper).
#include "runtime/model/qwen35_config.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"

namespace deltatune {

namespace {

using nlohmann::json;

absl::Status bad(const std::string& source, const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": field '", field, "': ", why));
}

absl::StatusOr<int64_t> get_int(const json& j, const std::string& source, const std::string& key,
                                std::optional<int64_t> fallback, int64_t min_value = 1) {
    if (!j.contains(key) || j[key].is_null()) {
        if (fallback) return *fallback;
        return bad(source, key, "missing");
    }
    if (!j[key].is_number_integer())
        return bad(source, key, absl::StrCat("expected an integer, got ", j[key].dump()));
    const int64_t v = j[key].get<int64_t>();
    if (v < min_value) return bad(source, key, absl::StrCat("must be >= ", min_value, ", got ", v));
    return v;
}

absl::StatusOr<double> get_double(const json& j, const std::string& source, const std::string& key,
                                  double fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number())
        return bad(source, key, absl::StrCat("expected a number, got ", j[key].dump()));
    return j[key].get<double>();
}

absl::StatusOr<DType> parse_dtype(const json& j, const std::string& source) {
    for (const char* key : {"dtype", "torch_dtype"}) {
        if (!j.contains(key) || !j[key].is_string()) continue;
        const std::string s = j[key].get<std::string>();
        if (s == "bfloat16") return DType::kBF16;
        if (s == "float16") return DType::kF16;
        if (s == "float32") return DType::kF32;
        return bad(source, key, absl::StrCat("unsupported dtype '", s, "'"));
    }
    return DType::kBF16;
}

absl::Status parse_text(const json& t, const std::string& source, Qwen35Config& c) {
    DT_ASSIGN_OR_RETURN(c.vocab_size, get_int(t, source, "vocab_size", 248320));
    DT_ASSIGN_OR_RETURN(c.hidden_size, get_int(t, source, "hidden_size", 4096));
    DT_ASSIGN_OR_RETURN(c.intermediate_size, get_int(t, source, "intermediate_size", 12288));
    DT_ASSIGN_OR_RETURN(c.num_layers, get_int(t, source, "num_hidden_layers", 32));
    DT_ASSIGN_OR_RETURN(c.num_attention_heads, get_int(t, source, "num_attention_heads", 16));
    DT_ASSIGN_OR_RETURN(c.num_key_value_heads, get_int(t, source, "num_key_value_heads", 4));
    DT_ASSIGN_OR_RETURN(c.head_dim, get_int(t, source, "head_dim", 256));
    DT_ASSIGN_OR_RETURN(c.linear_num_key_heads, get_int(t, source, "linear_num_key_heads", 16));
    DT_ASSIGN_OR_RETURN(c.linear_num_value_heads, get_int(t, source, "linear_num_value_heads", 32));
    DT_ASSIGN_OR_RETURN(c.linear_key_head_dim, get_int(t, source, "linear_key_head_dim", 128));
    DT_ASSIGN_OR_RETURN(c.linear_value_head_dim, get_int(t, source, "linear_value_head_dim", 128));
    DT_ASSIGN_OR_RETURN(c.linear_conv_kernel_dim, get_int(t, source, "linear_conv_kernel_dim", 4));
    DT_ASSIGN_OR_RETURN(c.rms_norm_eps, get_double(t, source, "rms_norm_eps", 1e-6));
    DT_ASSIGN_OR_RETURN(c.initializer_range, get_double(t, source, "initializer_range", 0.02));
    if (t.contains("hidden_act") && t["hidden_act"] != "silu") {
        return bad(source, "hidden_act",
                   absl::StrCat("only silu is supported, got ", t["hidden_act"].dump()));
    }
    if (t.contains("attention_bias") && t["attention_bias"].is_boolean() &&
        t["attention_bias"].get<bool>()) {
        return bad(source, "attention_bias", "attention biases are not part of Qwen3.5");
    }
    // RoPE: transformers v5 writes rope_parameters; v4-style files have top-level keys.
    double theta = 1e7;
    double factor = 0.25;
    DT_ASSIGN_OR_RETURN(theta, get_double(t, source, "rope_theta", theta));
    DT_ASSIGN_OR_RETURN(factor, get_double(t, source, "partial_rotary_factor", factor));
    if (t.contains("rope_parameters") && t["rope_parameters"].is_object()) {
        const json& rp = t["rope_parameters"];
        DT_ASSIGN_OR_RETURN(theta,
                            get_double(rp, source + " rope_parameters", "rope_theta", theta));
        DT_ASSIGN_OR_RETURN(
            factor, get_double(rp, source + " rope_parameters", "partial_rotary_factor", factor));
        if (rp.contains("rope_type") && rp["rope_type"] != "default") {
            return bad(
                source, "rope_parameters.rope_type",
                absl::StrCat("only 'default' RoPE is supported, got ", rp["rope_type"].dump()));
        }
    }
    c.rope_theta = theta;
    c.partial_rotary_factor = factor;
    if (t.contains("layer_types") && t["layer_types"].is_array()) {
        for (const auto& v : t["layer_types"]) {
            if (v == "linear_attention") {
                c.layer_types.push_back(LayerType::kLinearAttention);
            } else if (v == "full_attention") {
                c.layer_types.push_back(LayerType::kFullAttention);
            } else {
                return bad(source, "layer_types", absl::StrCat("unknown layer type ", v.dump()));
            }
        }
    } else {
        DT_ASSIGN_OR_RETURN(int64_t interval, get_int(t, source, "full_attention_interval", 4));
        for (int64_t i = 0; i < c.num_layers; ++i) {
            c.layer_types.push_back((i + 1) % interval ? LayerType::kLinearAttention
                                                       : LayerType::kFullAttention);
        }
    }
    return absl::OkStatus();
}

absl::Status validate(const Qwen35Config& c, const std::string& source) {
    if (static_cast<int64_t>(c.layer_types.size()) != c.num_layers) {
        return bad(source, "layer_types",
                   absl::StrCat("has ", c.layer_types.size(), " entries for num_hidden_layers ",
                                c.num_layers));
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0) {
        return bad(source, "num_key_value_heads",
                   absl::StrCat(c.num_key_value_heads, " does not divide num_attention_heads ",
                                c.num_attention_heads));
    }
    if (c.linear_num_value_heads % c.linear_num_key_heads != 0) {
        return bad(
            source, "linear_num_value_heads",
            absl::StrCat(c.linear_num_value_heads, " is not a multiple of linear_num_key_heads ",
                         c.linear_num_key_heads));
    }
    const int64_t rot = c.rotary_dim();
    if (rot <= 0 || rot % 2 != 0 || rot > c.head_dim) {
        return bad(source, "partial_rotary_factor",
                   absl::StrCat(c.partial_rotary_factor, " x head_dim ", c.head_dim,
                                " must give an even rotary dim in (0, head_dim]"));
    }
    return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Qwen35Config> parse_qwen35_config(const std::string& json_text,
                                                 const std::string& source) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", e.what()));
    }
    if (!j.is_object())
        return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
    Qwen35Config c;
    c.model_type = j.value("model_type", std::string());
    if (c.model_type != "qwen3_5" && c.model_type != "qwen3_5_text") {
        return absl::UnimplementedError(absl::StrCat(source, ": unsupported model_type '",
                                                     c.model_type,
                                                     "' (supported: qwen3_5, qwen3_5_text)"));
    }
    const json* text = &j;
    if (c.is_multimodal()) {
        if (!j.contains("text_config") || !j["text_config"].is_object()) {
            return bad(source, "text_config", "missing for model_type qwen3_5");
        }
        text = &j["text_config"];
    }
    DT_RETURN_IF_ERROR(parse_text(*text, source, c));
    // The tie decision reads the top-level flag (transformers' get_expanded_tied_weights_keys).
    c.tie_word_embeddings = j.value("tie_word_embeddings", false);
    DT_ASSIGN_OR_RETURN(
        c.dtype,
        parse_dtype(
            c.is_multimodal() && !j.contains("dtype") && !j.contains("torch_dtype") ? *text : j,
            source));
    DT_RETURN_IF_ERROR(validate(c, source));
    return c;
}

absl::StatusOr<Qwen35Config> load_qwen35_config(const std::string& path) {
    DT_ASSIGN_OR_RETURN(std::string text, read_file(path));
    return parse_qwen35_config(text, path);
}

}  // namespace deltatune
