// LoRA adapters on a Qwen3.5 model, PEFT's way (peft.LoraConfig with dropout 0, bias "none"):
// each targeted projection y = x W^T gains y += scale (x A^T) B^T with A (rank, in) and
// B (out, rank), scale = alpha / rank (alpha / sqrt(rank) with use_rslora). The base stays
// frozen; only A and B train.
//
// Names: canonical "model.layers.L.<self_attn|linear_attn|mlp>.<module>.lora_A.weight" (and
// lora_B); PEFT saves them as "base_model.model." + the checkpoint's name of that path
// (model.language_model.layers... for the multimodal layout), without the adapter's name.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"
#include "runtime/model/qwen35_params.h"

namespace deltatune {

struct LoraSpec {
    int64_t rank = 16;
    double alpha = 32;
    bool use_rslora = false;
    std::vector<Proj> targets;
    float scale() const;
};

// "model.layers.L.<self_attn|linear_attn|mlp>.<module>.": the canonical prefix of the pair on
// projection p of layer l ("lora_A.weight" and "lora_B.weight" follow).
std::string lora_pair_prefix(int64_t layer, Proj p);

// The projections named by PEFT target_modules entries; InvalidArgument naming an unknown one
// and listing the valid names.
absl::StatusOr<std::vector<Proj>> parse_lora_targets(const std::vector<std::string>& modules);

// The adapter's tensors (fp32, zero) for `base` (a make_qwen35_params set): one pair per
// targeted projection that a layer has (attention projections on full-attention layers, the
// Gated DeltaNet ones on linear-attention layers, the MLP's on every layer).
ParamSet make_lora_params(const Qwen35Config& config, const ParamSet& base, const LoraSpec& spec);

// PEFT's initialisation: A Kaiming-uniform (a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B zero.
void init_lora_params(ParamSet& adapters, uint64_t seed);

// Points `view`'s layers at the pairs in `adapters` (a make_lora_params set, or its gradients).
// The views share the tensors' storage: a gradient set's pairs receive the backward's sums.
void attach_lora(const Qwen35Config& config, ModelView& view, const ParamSet& adapters,
                 float scale);

// "base_model.model." + the checkpoint name of a canonical adapter tensor name.
std::string peft_name(const std::string& canonical, CheckpointLayout layout);

struct PeftAdapter {
    LoraSpec spec;
    ParamSet params;  // canonical names, fp32
};

// A PEFT LoRA folder (adapter_config.json, adapter_model.safetensors) for `model`. Refused with
// the reason: another peft_type, bias other than "none", modules_to_save, unknown target
// modules, a tensor missing, extra or of the wrong shape.
absl::StatusOr<PeftAdapter> load_peft_adapter(const std::string& dir, const HfModel& model);

// Folds the adapter into the base: W += scale B A for every pair (the merged model computes what
// base + adapter computes).
void merge_lora(const Qwen35Config& config, ParamSet& base, const ParamSet& adapters, float scale);
// The merged model's parameters for save_hf_model, one tensor at a time: the base's values (from
// model.params when materialized, else read from its checkpoint files), each adapted projection
// merged as merge_lora does. Host memory: one projection in fp32, or a bounded piece.
ParamBytes merged_lora_bytes(const HfModel& model, const ParamSet& adapters, float scale);

// Writes `adapters` as a PEFT LoRA folder into `dir` (created): adapter_config.json (task
// CAUSAL_LM, base_model_name_or_path `base`) and adapter_model.safetensors (fp32, PEFT's names),
// what peft.PeftModel.from_pretrained(base model, dir) loads.
absl::Status save_peft_adapter(const std::string& dir, const LoraSpec& spec,
                               const ParamSet& adapters, const HfModel& model,
                               const std::string& base);

}  // namespace deltatune
