// The memory planner: predicts one GPU rank's peak memory for a training job from the model
// config, world size, tokens per micro-batch and the activation-recompute policy, before any
// weight is loaded, so the daemon can refuse a job that cannot fit with the numbers that say why.
//
// The model of memory follows the training step: per rank, the bf16 parameter
// shard, fp32 master weights, AdamW moments and gradient shard (each 1/world of the flat padded
// groups); resident activations (every layer's saved tensors without recompute, including the
// delta rule's chunk states the GDN forward keeps for its backward; with per-layer recompute,
// each layer's input); the larger of two phases that never overlap: the embedding and LM head
// (gathered with the next unit prefetched, their unsharded fp32 gradient, the fused
// cross-entropy's chunk) and a layer's backward (two gathered layers, one unsharded fp32 layer
// gradient, and with recompute that layer's recomputed activations); and a fixed allowance for
// the CUDA context, cuBLAS workspaces and allocator slack. Under a LoRA adapter the base is only
// its bf16 shard and nothing in the step forms a full-size gradient.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/device/device_context.h"
#include "runtime/model/lora.h"
#include "runtime/model/qwen35_config.h"
#include "runtime/model/recompute.h"

namespace deltatune {

struct MemoryPlanInput {
    int world_size = 1;
    int64_t tokens_per_batch = 8192;
    Recompute recompute = Recompute::kLayer;
    int64_t ce_chunk_tokens = 4096;   // fused linear cross-entropy chunk (Qwen35GpuModel's)
    GpuArch gpu = hopper_gpu_arch();  // the GPU's (an H200's by default): which cores serve
    AttentionCore attention_core = AttentionCore::kWgmma;  // what the ranks' contexts resolve
    // LoRA (count_lora_parameters): the base frozen in bf16 (no master, moments or gradient),
    // the adapter's fp32 state replicated. 0: full fine-tuning.
    int64_t adapter_parameters = 0;
    // With per-layer recompute: the last `kept_layers` layers keep their activations instead.
    int64_t kept_layers = 0;
    // FP8 projections (GpuRankOptions::fp8_projections): a projection's quantised operands are
    // transient scratch of the layer phase.
    bool fp8_projections = false;
};

struct MemoryPlan {
    int64_t parameters = 0;  // total model parameters
    struct Item {
        std::string what;
        int64_t bytes = 0;
    };
    std::vector<Item> items;  // the breakdown, largest contributors first as listed
    int64_t peak_bytes = 0;
    // "peak 412.3 GiB per rank = master+moments 301.9 GiB + ..."
    std::string describe() const;
};

int64_t count_parameters(const Qwen35Config& config);
// The adapter's parameters: rank (in + out) for every targeted projection a layer has.
int64_t count_lora_parameters(const Qwen35Config& config, const LoraSpec& spec);
MemoryPlan plan_memory(const Qwen35Config& config, const MemoryPlanInput& input);

// OK when the plan fits `device_bytes` with `headroom` (fraction kept free); otherwise
// ResourceExhausted quoting the plan, the device and the smallest world size that would fit.
absl::Status check_fits(const Qwen35Config& config, const MemoryPlanInput& input,
                        int64_t device_bytes, double headroom = 0.05);

// The automatic policy ("auto"): no recomputation when that plan fits `device_bytes` with
// `headroom` (per-layer recomputation costs about a third more compute), else per layer.
Recompute choose_recompute(const Qwen35Config& config, MemoryPlanInput input, int64_t device_bytes,
                           double headroom = 0.05);

// With per-layer recompute, how many of the last layers can keep their activations instead (the
// most that still fit `device_bytes` with `headroom`; 0 when none do).
int64_t choose_kept_layers(const Qwen35Config& config, MemoryPlanInput input, int64_t device_bytes,
                           double headroom = 0.05);

// The GPU model's policy for the name a job or `deltatune bench` gives: "layer", "none", or
// "auto" (choose_recompute for the memory of the current CUDA device, at input's world size and
// tokens per batch). InvalidArgument for another name; FailedPrecondition for "auto" without CUDA.
absl::StatusOr<Recompute> resolve_recompute(const std::string& name, const Qwen35Config& config,
                                            const MemoryPlanInput& input);
// For "auto" that resolve_recompute resolved to per-layer recompute: choose_kept_layers for
// the current CUDA device; 0 for any other name or policy.
absl::StatusOr<int64_t> resolve_kept_layers(const std::string& name, Recompute resolved,
                                            const Qwen35Config& config,
                                            const MemoryPlanInput& input);

}  // namespace deltatune
