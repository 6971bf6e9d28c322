// Parameter names, shapes, views and random initialisation for Qwen3.5.
#include "runtime/model/qwen35_params.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace deltatune {

std::string layer_prefix(int64_t layer) {
    return absl::StrCat("model.layers.", layer, ".");
}

ParamSet make_qwen35_params(const Qwen35Config& c, bool tied, bool zero_fill) {
    ParamSet p;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, DType dtype) {
        p.add(name, std::move(shape), dtype, zero_fill);
    };
    const DType dt = c.dtype;
    const int64_t H = c.hidden_size;
    add("model.embed_tokens.weight", {c.vocab_size, H}, dt);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string pre = layer_prefix(l);
        add(pre + "input_layernorm.weight", {H}, dt);
        if (c.layer_types[static_cast<size_t>(l)] == LayerType::kLinearAttention) {
            const std::string la = pre + "linear_attn.";
            add(la + "in_proj_qkv.weight", {c.conv_dim(), H}, dt);
            add(la + "in_proj_z.weight", {c.value_dim(), H}, dt);
            add(la + "in_proj_b.weight", {c.linear_num_value_heads, H}, dt);
            add(la + "in_proj_a.weight", {c.linear_num_value_heads, H}, dt);
            add(la + "conv1d.weight", {c.conv_dim(), 1, c.linear_conv_kernel_dim}, dt);
            add(la + "A_log", {c.linear_num_value_heads}, DType::kF32);
            add(la + "dt_bias", {c.linear_num_value_heads}, dt);
            add(la + "norm.weight", {c.linear_value_head_dim}, DType::kF32);
            add(la + "out_proj.weight", {H, c.value_dim()}, dt);
        } else {
            const std::string sa = pre + "self_attn.";
            const int64_t D = c.head_dim;
            add(sa + "q_proj.weight", {2 * c.num_attention_heads * D, H}, dt);
            add(sa + "k_proj.weight", {c.num_key_value_heads * D, H}, dt);
            add(sa + "v_proj.weight", {c.num_key_value_heads * D, H}, dt);
            add(sa + "o_proj.weight", {H, c.num_attention_heads * D}, dt);
            add(sa + "q_norm.weight", {D}, dt);
            add(sa + "k_norm.weight", {D}, dt);
        }
        add(pre + "post_attention_layernorm.weight", {H}, dt);
        add(pre + "mlp.gate_proj.weight", {c.intermediate_size, H}, dt);
        add(pre + "mlp.up_proj.weight", {c.intermediate_size, H}, dt);
        add(pre + "mlp.down_proj.weight", {H, c.intermediate_size}, dt);
    }
    add("model.norm.weight", {H}, dt);
    if (!tied) add("lm_head.weight", {c.vocab_size, H}, dt);
    return p;
}

const char* proj_module_name(Proj p) {
    static constexpr const char* kNames[kNumProj] = {
        "q_proj",    "k_proj",      "v_proj",    "o_proj",    "gate_proj", "up_proj",
        "down_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"};
    return kNames[static_cast<size_t>(p)];
}

const Tensor& LayerView::weight(Proj p) const {
    switch (p) {
        case Proj::kQ:
            return q_proj;
        case Proj::kK:
            return k_proj;
        case Proj::kV:
            return v_proj;
        case Proj::kO:
            return o_proj;
        case Proj::kGate:
            return mlp_gate;
        case Proj::kUp:
            return mlp_up;
        case Proj::kDown:
            return mlp_down;
        case Proj::kQkv:
            return in_proj_qkv;
        case Proj::kZ:
            return in_proj_z;
        case Proj::kB:
            return in_proj_b;
        case Proj::kA:
            return in_proj_a;
        default:
            return out_proj;
    }
}

ModelView model_view(const Qwen35Config& c, ParamSet& p) {
    ModelView m;
    m.embed = p.get("model.embed_tokens.weight");
    m.final_norm = p.get("model.norm.weight");
    m.lm_head = p.contains("lm_head.weight") ? p.get("lm_head.weight") : m.embed;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string pre = layer_prefix(l);
        LayerView v;
        v.type = c.layer_types[static_cast<size_t>(l)];
        v.input_norm = p.get(pre + "input_layernorm.weight");
        v.post_norm = p.get(pre + "post_attention_layernorm.weight");
        v.mlp_gate = p.get(pre + "mlp.gate_proj.weight");
        v.mlp_up = p.get(pre + "mlp.up_proj.weight");
        v.mlp_down = p.get(pre + "mlp.down_proj.weight");
        if (v.type == LayerType::kLinearAttention) {
            const std::string la = pre + "linear_attn.";
            v.in_proj_qkv = p.get(la + "in_proj_qkv.weight");
            v.in_proj_z = p.get(la + "in_proj_z.weight");
            v.in_proj_b = p.get(la + "in_proj_b.weight");
            v.in_proj_a = p.get(la + "in_proj_a.weight");
            v.conv_w = p.get(la + "conv1d.weight");
            v.A_log = p.get(la + "A_log");
            v.dt_bias = p.get(la + "dt_bias");
            v.gdn_norm = p.get(la + "norm.weight");
            v.out_proj = p.get(la + "out_proj.weight");
        } else {
            const std::string sa = pre + "self_attn.";
            v.q_proj = p.get(sa + "q_proj.weight");
            v.k_proj = p.get(sa + "k_proj.weight");
            v.v_proj = p.get(sa + "v_proj.weight");
            v.o_proj = p.get(sa + "o_proj.weight");
            v.q_norm = p.get(sa + "q_norm.weight");
            v.k_norm = p.get(sa + "k_norm.weight");
        }
        m.layers.push_back(std::move(v));
    }
    return m;
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Qwen35Initializer::Qwen35Initializer(const Qwen35Config& c, uint64_t seed)
    : range_(c.initializer_range), rng_(seed) {}

// mt19937_64's sequence is fixed by the standard; Box-Muller is written out so the values do not
// depend on the standard library's distribution implementation.
void Qwen35Initializer::fill(const std::string& name, float* w, int64_t n) {
    auto uniform = [&]() { return (static_cast<double>(rng_() >> 11) + 0.5) * 0x1.0p-53; };
    auto normal = [&]() {
        return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform());
    };
    if (ends_with(name, "linear_attn.A_log")) {
        for (int64_t i = 0; i < n; ++i)
            w[i] = static_cast<float>(std::log(0.01 + (16.0 - 0.01) * uniform()));
    } else if (ends_with(name, "linear_attn.dt_bias") ||
               ends_with(name, "linear_attn.norm.weight")) {
        for (int64_t i = 0; i < n; ++i) w[i] = 1.0f;
    } else if (ends_with(name, "norm.weight") || ends_with(name, "layernorm.weight")) {
        for (int64_t i = 0; i < n; ++i) w[i] = 0.0f;  // zero-centred: effective scale 1
    } else {
        for (int64_t i = 0; i < n; ++i) w[i] = static_cast<float>(range_ * normal());
    }
}

void init_qwen35_params(const Qwen35Config& c, ParamSet& params, uint64_t seed) {
    Qwen35Initializer init(c, seed);
    for (auto& p : params.all()) init.fill(p.name, p.value.data<float>(), p.value.numel());
}

}  // namespace deltatune
