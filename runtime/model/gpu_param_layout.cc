#include "runtime/model/gpu_param_layout.h"

#include <map>

#include "kernels/tensor/init_fill.h"
#include "runtime/model/qwen35_params.h"

namespace deltatune {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t aligned(int64_t n) {
    return (n + kGpuParamAlign - 1) / kGpuParamAlign * kGpuParamAlign;
}

}  // namespace

int64_t GpuParamLayout::total_unit_numel() const {
    int64_t t = 0;
    for (int64_t n : unit_numel) t += n;
    return t;
}

GpuParamLayout make_gpu_param_layout(const Qwen35Config& config, const ParamSet& params,
                                     bool replicate_fp32_read) {
    GpuParamLayout out;
    out.num_units = static_cast<int>(config.num_layers) + 2;
    out.tied = !params.contains("lm_head.weight");
    out.unit_numel.assign(static_cast<size_t>(out.num_units), 0);
    // Units by name: "model.layers.{l}." -> l + 1; the embedding -> 0 (head when tied); the rest
    // (final norm, lm_head) -> head.
    std::map<std::string, int> layer_of_prefix;
    for (int64_t l = 0; l < config.num_layers; ++l)
        layer_of_prefix[layer_prefix(l)] = static_cast<int>(l) + 1;
    for (const auto& p : params.all()) {
        GpuParamSlot s;
        s.numel = p.value.numel();
        s.unit = out.head_unit();
        if (p.name == "model.embed_tokens.weight") {
            s.unit = out.tied ? out.head_unit() : 0;
        } else if (p.name.rfind("model.layers.", 0) == 0) {
            const size_t dot = p.name.find('.', 13);
            s.unit = layer_of_prefix.at(p.name.substr(0, dot + 1));
        }
        s.replicated = replicate_fp32_read && (ends_with(p.name, "linear_attn.conv1d.weight") ||
                                               ends_with(p.name, "linear_attn.A_log") ||
                                               ends_with(p.name, "linear_attn.dt_bias") ||
                                               ends_with(p.name, "linear_attn.norm.weight"));
        int64_t& end =
            s.replicated ? out.replicated_numel : out.unit_numel[static_cast<size_t>(s.unit)];
        s.offset = end;
        end += aligned(s.numel);
        out.slots.push_back(s);
    }
    return out;
}

GpuInitRule gpu_init_rule(const std::string& name, float initializer_range) {
    if (ends_with(name, "linear_attn.A_log"))
        return {static_cast<int>(InitFill::kLogUniform), 0.01f, 16.0f};
    if (ends_with(name, "linear_attn.dt_bias") || ends_with(name, "linear_attn.norm.weight"))
        return {static_cast<int>(InitFill::kConstant), 1.0f, 0.0f};
    if (ends_with(name, "norm.weight") || ends_with(name, "layernorm.weight"))
        return {static_cast<int>(InitFill::kConstant), 0.0f, 0.0f};
    return {static_cast<int>(InitFill::kNormal), initializer_range, 0.0f};
}

}  // namespace deltatune
