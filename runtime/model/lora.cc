#include "runtime/model/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"
#include "runtime/checkpoint/safetensors.h"

namespace deltatune {

namespace {

// Where a projection lives in a layer: "self_attn.", "linear_attn." or "mlp.".
const char* proj_group(Proj p) {
    switch (p) {
        case Proj::kQ:
        case Proj::kK:
        case Proj::kV:
        case Proj::kO:
            return "self_attn.";
        case Proj::kGate:
        case Proj::kUp:
        case Proj::kDown:
            return "mlp.";
        default:
            return "linear_attn.";
    }
}

absl::Status invalid(const std::string& dir, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": ", what));
}

// target_modules as PEFT writes it: a list of names, or one name.
absl::StatusOr<std::vector<std::string>> target_names(const nlohmann::json& t,
                                                      const std::string& dir) {
    if (t.is_string()) return std::vector<std::string>{t.get<std::string>()};
    if (!t.is_array()) return invalid(dir, "adapter_config.json: target_modules is not a list");
    std::vector<std::string> out;
    for (const auto& x : t) {
        if (!x.is_string()) return invalid(dir, "adapter_config.json: target_modules entry");
        out.push_back(x.get<std::string>());
    }
    return out;
}

absl::StatusOr<LoraSpec> read_peft_config(const std::string& dir) {
    DT_ASSIGN_OR_RETURN(const std::string text, read_file(dir + "/adapter_config.json"));
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object()) return invalid(dir, "adapter_config.json is not a JSON object");
    if (j.value("peft_type", "LORA") != "LORA") {
        return invalid(dir, absl::StrCat("peft_type ", j.value("peft_type", ""), " (only LORA)"));
    }
    if (j.contains("bias") && j["bias"] != "none") {
        return invalid(dir, absl::StrCat("bias ", j["bias"].dump(), " (only \"none\")"));
    }
    if (j.contains("modules_to_save") && !j["modules_to_save"].is_null() &&
        !j["modules_to_save"].empty()) {
        return invalid(dir, "modules_to_save is not supported");
    }
    LoraSpec s;
    s.rank = j.value("r", int64_t{8});
    s.alpha = j.value("lora_alpha", 8.0);
    s.use_rslora = j.value("use_rslora", false);
    if (s.rank < 1) return invalid(dir, absl::StrCat("r ", s.rank, " must be at least 1"));
    if (!j.contains("target_modules"))
        return invalid(dir, "adapter_config.json: no target_modules");
    DT_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                        target_names(j["target_modules"], dir));
    absl::StatusOr<std::vector<Proj>> targets = parse_lora_targets(names);
    if (!targets.ok()) return invalid(dir, std::string(targets.status().message()));
    s.targets = *std::move(targets);
    return s;
}

}  // namespace

std::string lora_pair_prefix(int64_t l, Proj p) {
    return absl::StrCat(layer_prefix(l), proj_group(p), proj_module_name(p), ".");
}

float LoraSpec::scale() const {
    const double r = static_cast<double>(rank);
    return static_cast<float>(use_rslora ? alpha / std::sqrt(r) : alpha / r);
}

absl::StatusOr<std::vector<Proj>> parse_lora_targets(const std::vector<std::string>& modules) {
    std::vector<Proj> out;
    std::vector<std::string> valid;
    for (size_t i = 0; i < kNumProj; ++i) valid.push_back(proj_module_name(static_cast<Proj>(i)));
    for (const std::string& m : modules) {
        bool found = false;
        for (size_t i = 0; i < kNumProj; ++i) {
            if (m == valid[i]) {
                found = true;
                if (std::find(out.begin(), out.end(), static_cast<Proj>(i)) == out.end()) {
                    out.push_back(static_cast<Proj>(i));
                }
            }
        }
        if (!found) {
            return absl::InvalidArgumentError(absl::StrCat(
                "unknown LoRA target module '", m, "' (valid: ", absl::StrJoin(valid, ", "), ")"));
        }
    }
    if (out.empty()) return absl::InvalidArgumentError("no LoRA target modules");
    return out;
}

ParamSet make_lora_params(const Qwen35Config& c, const ParamSet& base, const LoraSpec& spec) {
    ParamSet out;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        for (Proj p : spec.targets) {
            const std::string path = lora_pair_prefix(l, p);
            if (!base.contains(path + "weight")) continue;  // not a projection of this layer
            const std::vector<int64_t>& shape = base.get(path + "weight").shape();
            out.add(path + "lora_A.weight", {spec.rank, shape[1]}, DType::kF32);
            out.add(path + "lora_B.weight", {shape[0], spec.rank}, DType::kF32);
        }
    }
    return out;
}

void init_lora_params(ParamSet& adapters, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (NamedParam& p : adapters.all()) {
        float* v = p.value.data<float>();
        if (p.name.ends_with("lora_B.weight")) {
            std::fill(v, v + p.value.numel(), 0.0f);
            continue;
        }
        const double bound = 1.0 / std::sqrt(static_cast<double>(p.value.shape()[1]));
        for (int64_t i = 0; i < p.value.numel(); ++i) {
            const double u = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
            v[i] = static_cast<float>((2 * u - 1) * bound);
        }
    }
}

void attach_lora(const Qwen35Config& c, ModelView& view, const ParamSet& adapters, float scale) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
        LayerView& layer = view.layers[static_cast<size_t>(l)];
        layer.lora_scale = scale;
        for (size_t i = 0; i < kNumProj; ++i) {
            const std::string path = lora_pair_prefix(l, static_cast<Proj>(i));
            if (!adapters.contains(path + "lora_A.weight")) continue;
            layer.lora[i] = {adapters.get(path + "lora_A.weight"),
                             adapters.get(path + "lora_B.weight")};
        }
    }
}

namespace {

// W (out x in) += scale B A for B (out x r), A (r x in).
void merge_pair(float* w, const Tensor& a, const Tensor& b, int64_t out, int64_t in, float scale) {
    const int64_t r = a.shape()[0];
    const float* ad = a.data<float>();
    const float* bd = b.data<float>();
    for (int64_t o = 0; o < out; ++o) {
        for (int64_t k = 0; k < r; ++k) {
            const float s = scale * bd[o * r + k];
            for (int64_t x = 0; x < in; ++x) w[o * in + x] += s * ad[k * in + x];
        }
    }
}

}  // namespace

void merge_lora(const Qwen35Config& c, ParamSet& base, const ParamSet& adapters, float scale) {
    ModelView view = model_view(c, base);
    attach_lora(c, view, adapters, scale);
    for (const LayerView& layer : view.layers) {
        for (size_t i = 0; i < kNumProj; ++i) {
            const LoraPair& pair = layer.lora[i];
            if (!pair.on()) continue;
            const Tensor& w = layer.weight(static_cast<Proj>(i));
            merge_pair(w.data<float>(), pair.a, pair.b, w.shape()[0], w.shape()[1], scale);
        }
    }
}

ParamBytes merged_lora_bytes(const HfModel& model, const ParamSet& adapters, float scale) {
    return [&model, &adapters, scale](size_t i, const SafetensorsWrite& write) -> absl::Status {
        const NamedParam& p = model.params.all()[i];
        const std::string prefix = p.name.substr(0, p.name.size() - std::strlen("weight"));
        const bool adapted =
            p.name.ends_with("weight") && adapters.contains(prefix + "lora_A.weight");
        if (!adapted && model.materialized) return param_bytes_of(model.params)(i, write);
        if (!adapted) {  // the stored bytes as they are, a piece at a time
            constexpr int64_t kPiece = 16 << 20;
            const size_t size = dtype_size(p.stored_dtype);
            std::vector<unsigned char> buf(static_cast<size_t>(kPiece) * size);
            for (int64_t at = 0; at < p.value.numel(); at += kPiece) {
                const int64_t end = std::min(p.value.numel(), at + kPiece);
                DT_RETURN_IF_ERROR(model.weights->copy(i, at, end, buf.data()));
                DT_RETURN_IF_ERROR(write(buf.data(), static_cast<size_t>(end - at) * size));
            }
            return absl::OkStatus();
        }
        std::vector<float> w(static_cast<size_t>(p.value.numel()));
        if (model.materialized) {
            std::copy(p.value.data<float>(), p.value.data<float>() + p.value.numel(), w.begin());
        } else {
            DT_RETURN_IF_ERROR(model.weights->copy_f32(i, 0, p.value.numel(), w.data()));
        }
        merge_pair(w.data(), adapters.get(prefix + "lora_A.weight"),
                   adapters.get(prefix + "lora_B.weight"), p.value.shape()[0], p.value.shape()[1],
                   scale);
        return write_f32_as(p.stored_dtype, w.data(), p.value.numel(), write);
    };
}

std::string peft_name(const std::string& canonical, CheckpointLayout layout) {
    return "base_model.model." + checkpoint_name(canonical, layout);
}

absl::StatusOr<PeftAdapter> load_peft_adapter(const std::string& dir, const HfModel& model) {
    PeftAdapter a;
    DT_ASSIGN_OR_RETURN(a.spec, read_peft_config(dir));
    a.params = make_lora_params(model.config, model.params, a.spec);
    DT_ASSIGN_OR_RETURN(const SafetensorsFile f,
                        SafetensorsFile::open(dir + "/adapter_model.safetensors"));
    std::set<std::string> unused(f.names().begin(), f.names().end());
    for (NamedParam& p : a.params.all()) {
        const std::string name = peft_name(p.name, model.layout);
        absl::StatusOr<Tensor> t = f.get(name);
        if (!t.ok()) return invalid(dir, absl::StrCat("adapter_model.safetensors has no ", name));
        if (t->shape() != p.value.shape()) {
            return invalid(dir, absl::StrCat(name, " has shape [", absl::StrJoin(t->shape(), ", "),
                                             "], the model needs [",
                                             absl::StrJoin(p.value.shape(), ", "), "]"));
        }
        DT_ASSIGN_OR_RETURN(const Tensor v, t->to_cpu_f32());
        std::copy(v.data<float>(), v.data<float>() + v.numel(), p.value.data<float>());
        unused.erase(name);
    }
    if (!unused.empty()) {
        return invalid(dir, absl::StrCat("adapter_model.safetensors has tensors this model and "
                                         "adapter_config.json do not place, e.g. ",
                                         *unused.begin()));
    }
    return a;
}

absl::Status save_peft_adapter(const std::string& dir, const LoraSpec& spec,
                               const ParamSet& adapters, const HfModel& model,
                               const std::string& base) {
    nlohmann::ordered_json j;
    std::vector<std::string> modules;
    for (Proj p : spec.targets) modules.push_back(proj_module_name(p));
    j["peft_type"] = "LORA";
    j["task_type"] = "CAUSAL_LM";
    j["base_model_name_or_path"] = base;
    j["r"] = spec.rank;
    j["lora_alpha"] = spec.alpha;
    j["lora_dropout"] = 0.0;
    j["use_rslora"] = spec.use_rslora;
    j["target_modules"] = modules;
    j["bias"] = "none";
    j["modules_to_save"] = nullptr;
    j["fan_in_fan_out"] = false;
    j["init_lora_weights"] = true;
    j["inference_mode"] = true;
    DT_RETURN_IF_ERROR(process_sandbox().make_dirs(dir));  // as save_hf_model: confined
    DT_RETURN_IF_ERROR(write_file_atomic(dir + "/adapter_config.json", j.dump(2) + "\n"));
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const NamedParam& p : adapters.all()) {
        tensors.emplace_back(peft_name(p.name, model.layout), p.value);
    }
    return write_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
}

}  // namespace deltatune
