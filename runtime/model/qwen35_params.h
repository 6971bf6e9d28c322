// The Qwen3.5 parameter list (names, shapes, stored dtypes) and per-layer views over a ParamSet.
// One LayerView is used by both the forward and the backward pass, over params or over grads.
#pragma once

#include <array>

#include <cstdint>
#include <random>
#include <string>
#include <utility>

#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

// Every parameter of the text model, zero-filled, in checkpoint order. `lm_head.weight` is
// present only when untied. Stored dtype is config.dtype except A_log and the gated-norm weight,
// which the published checkpoints keep in F32. zero_fill false leaves the host values unwritten
// (ParamSet::add), for a layout whose values live only on the device.
ParamSet make_qwen35_params(const Qwen35Config& config, bool tied, bool zero_fill = true);

std::string layer_prefix(int64_t layer);  // "model.layers.{l}."

// The projections of a layer, by the module names Hugging Face (and PEFT's target_modules) use.
enum class Proj : int { kQ, kK, kV, kO, kGate, kUp, kDown, kQkv, kZ, kB, kA, kOut, kCount };
inline constexpr size_t kNumProj = static_cast<size_t>(Proj::kCount);
const char* proj_module_name(Proj p);  // "q_proj", ..., "in_proj_qkv", ..., "out_proj"

// A LoRA adapter's pair on one projection: A (rank, in), B (out, rank); undefined when none.
struct LoraPair {
    Tensor a, b;
    bool on() const { return a.defined(); }
};

struct LayerView {
    LayerType type;
    Tensor input_norm;  // (H) zero-centred
    Tensor post_norm;   // (H) zero-centred
    Tensor mlp_gate;    // (I, H)
    Tensor mlp_up;      // (I, H)
    Tensor mlp_down;    // (H, I)
    // Gated DeltaNet (linear_attention layers)
    Tensor in_proj_qkv;  // (conv_dim, H), rows [q | k | v]
    Tensor in_proj_z;    // (value_dim, H)
    Tensor in_proj_b;    // (Hv, H)
    Tensor in_proj_a;    // (Hv, H)
    Tensor conv_w;       // (conv_dim, 1, K)
    Tensor A_log;        // (Hv)
    Tensor dt_bias;      // (Hv)
    Tensor gdn_norm;     // (dv) plain weight
    Tensor out_proj;     // (H, value_dim)
    // Gated full attention (full_attention layers)
    Tensor q_proj;  // (2 Hq D, H), per head [query | gate]
    Tensor k_proj;  // (Hkv D, H)
    Tensor v_proj;  // (Hkv D, H)
    Tensor o_proj;  // (H, Hq D)
    Tensor q_norm;  // (D) zero-centred
    Tensor k_norm;  // (D) zero-centred
    // LoRA (model/lora.h): per projection, and the branch's scale (alpha / rank).
    std::array<LoraPair, kNumProj> lora;
    float lora_scale = 0;
    const Tensor& weight(Proj p) const;  // the projection's base weight
    Tensor& weight(Proj p) { return const_cast<Tensor&>(std::as_const(*this).weight(p)); }
};

struct ModelView {
    Tensor embed;       // (V, H)
    Tensor final_norm;  // (H)
    Tensor lm_head;     // (V, H); the embedding itself when tied
    std::vector<LayerView> layers;
};

ModelView model_view(const Qwen35Config& config, ParamSet& params);

// transformers' initialisation: N(0, initializer_range^2) for linears, conv and embedding;
// zero-centred norms 0; gated norm 1; dt_bias 1; A_log = log(U(0.01, 16)). Deterministic in seed.
void init_qwen35_params(const Qwen35Config& config, ParamSet& params, uint64_t seed);
// The same values one tensor at a time: fill() each parameter in ParamSet order (the generator
// runs on from one tensor to the next), so a checkpoint is written without the model in memory.
class Qwen35Initializer {
  public:
    Qwen35Initializer(const Qwen35Config& config, uint64_t seed);
    void fill(const std::string& name, float* values, int64_t n);

  private:
    double range_;
    std::mt19937_64 rng_;
};

}  // namespace deltatune
