#include "runtime/train/memory_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/attention/attention.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/device_context.h"
#include "runtime/model/gpu_blocks.h"
#include "runtime/model/qwen35_gpu_model.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include "runtime/device/cuda_status.h"
#endif

namespace deltatune {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kFixedBytes = 3 * kGiB;  // CUDA context, cuBLAS(Lt)/NCCL workspaces, slack

int64_t layer_parameters(const Qwen35Config& c, LayerType type) {
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    int64_t n = 2 * H + 3 * H * I;  // two norms + SwiGLU MLP
    if (type == LayerType::kLinearAttention) {
        const int64_t hv = c.linear_num_value_heads;
        n += c.conv_dim() * H + c.value_dim() * H + 2 * hv * H +
             c.conv_dim() * c.linear_conv_kernel_dim + 2 * hv + c.linear_value_head_dim +
             H * c.value_dim();
    } else {
        const int64_t D = c.head_dim, hq = c.num_attention_heads, hkv = c.num_key_value_heads;
        n += 2 * hq * D * H + 2 * hkv * D * H + H * hq * D + 2 * D;
    }
    return n;
}

// Bytes per token a layer saves for its backward (bf16 activations; fp32 statistics).
int64_t layer_activation_bytes_per_token(const Qwen35Config& c, LayerType type,
                                         const MemoryPlanInput& in) {
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    int64_t elems = 2 * H + 3 * I + H;  // norm inputs/outputs, gate/up/act, down input
    int64_t fp32 = 0;
    if (type == LayerType::kLinearAttention) {
        elems += 2 * c.conv_dim() + 3 * c.value_dim() + 2 * c.linear_num_value_heads;
        // The delta rule's chunk intermediates the training forward keeps for the backward
        // (gated_delta_rule_forward_saving), per token and value head: W, Qd, Kd (dk each) and
        // the 64-wide Aqk and T rows in bf16; U and Vn (dv each) and a 64th of a dk x dv chunk
        // state in fp32.
        const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
        elems += c.linear_num_value_heads * (3 * dk + 2 * 64);
        fp32 += c.linear_num_value_heads * (2 * dv + dk * dv / 64);
    } else {
        const int64_t qd = c.num_attention_heads * c.head_dim,
                      kvd = c.num_key_value_heads * c.head_dim;
        // q_proj's [query | gate], q after norm + RoPE, the gated output y; k before and after
        // norm + RoPE, v; lse and the q / k norms' rstd. The other cores' backwards also take the
        // ungated o, which the wgmma core does not keep.
        elems +=
            4 * qd + 3 * kvd + (gpu_attention_keeps_y_only(c, in.gpu, in.attention_core) ? 0 : qd);
        fp32 += 2 * c.num_attention_heads + c.num_key_value_heads;
    }
    return 2 * elems + 4 * fp32;
}

std::string gib(int64_t bytes) {
    return absl::StrFormat("%.1f GiB", double(bytes) / double(kGiB));
}

}  // namespace

int64_t count_parameters(const Qwen35Config& c) {
    int64_t n = c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) + c.hidden_size;
    for (LayerType t : c.layer_types) n += layer_parameters(c, t);
    return n;
}

// (in, out) of projection p on a layer of `type`; (0, 0) where that layer has no such projection.
std::pair<int64_t, int64_t> proj_dims(const Qwen35Config& c, LayerType type, Proj p) {
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    const bool linear = type == LayerType::kLinearAttention;
    const int64_t qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
    const int64_t hv = c.linear_num_value_heads;
    switch (p) {
        case Proj::kGate:
        case Proj::kUp:
            return {H, I};
        case Proj::kDown:
            return {I, H};
        case Proj::kQ:
            return linear ? std::pair<int64_t, int64_t>{0, 0} : std::pair{H, 2 * qd};
        case Proj::kK:
        case Proj::kV:
            return linear ? std::pair<int64_t, int64_t>{0, 0} : std::pair{H, kvd};
        case Proj::kO:
            return linear ? std::pair<int64_t, int64_t>{0, 0} : std::pair{qd, H};
        case Proj::kQkv:
            return linear ? std::pair{H, c.conv_dim()} : std::pair<int64_t, int64_t>{0, 0};
        case Proj::kZ:
            return linear ? std::pair{H, c.value_dim()} : std::pair<int64_t, int64_t>{0, 0};
        case Proj::kB:
        case Proj::kA:
            return linear ? std::pair{H, hv} : std::pair<int64_t, int64_t>{0, 0};
        case Proj::kOut:
            return linear ? std::pair{c.value_dim(), H} : std::pair<int64_t, int64_t>{0, 0};
        default:
            return {0, 0};
    }
}

int64_t count_lora_parameters(const Qwen35Config& c, const LoraSpec& spec) {
    int64_t n = 0;
    for (LayerType t : c.layer_types) {
        for (Proj p : spec.targets) {
            const auto [in, out] = proj_dims(c, t, p);
            n += spec.rank * (in + out);
        }
    }
    return n;
}

MemoryPlan plan_memory(const Qwen35Config& c, const MemoryPlanInput& in) {
    MemoryPlan plan;
    const int64_t W = std::max(1, in.world_size), T = in.tokens_per_batch;
    plan.parameters = count_parameters(c);
    const int64_t shard = (plan.parameters + W - 1) / W;
    int64_t biggest_layer = 0, biggest_act = 0, all_act = 0, kept_act = 0;
    const int64_t L = static_cast<int64_t>(c.layer_types.size());
    const int64_t kept = std::clamp<int64_t>(in.kept_layers, 0, L);
    for (int64_t l = 0; l < L; ++l) {
        const LayerType t = c.layer_types[static_cast<size_t>(l)];
        biggest_layer = std::max(biggest_layer, layer_parameters(c, t));
        const int64_t act = layer_activation_bytes_per_token(c, t, in) * T;
        biggest_act = std::max(biggest_act, act);
        all_act += act;
        if (l >= L - kept) kept_act += act;
    }
    const int64_t embed = c.vocab_size * c.hidden_size;
    const bool none = in.recompute == Recompute::kNone;
    const int64_t resident = none ? all_act : 2 * c.hidden_size * T * (L - kept) + kept_act;
    // Two phases of the step hold the most beside the resident state, and never together: the
    // embedding and LM head (gathered with the next unit prefetched, their unsharded fp32
    // gradient, the cross-entropy chunk, the labeled rows) and a layer's backward (it and the
    // prefetched layer gathered, its unsharded fp32 gradient, and with recomputation its recomputed
    // activations).
    const int64_t big = std::max(biggest_layer, embed);
    const int64_t ce = std::min(in.ce_chunk_tokens, T) * c.vocab_size * 2;  // bf16 logits
    const bool lora = in.adapter_parameters > 0;
    const int64_t grad_bytes = lora ? 0 : 4;  // a frozen base forms no full-size gradient
    // The label-only head's labeled rows and their gradient (bf16; at most every row).
    const int64_t head_rows = 2 * 2 * T * c.hidden_size;
    const int64_t head_phase = 2 * 2 * big + grad_bytes * big + ce + head_rows;
    int64_t attention_ws = 0;
    if (std::find(c.layer_types.begin(), c.layer_types.end(), LayerType::kFullAttention) !=
        c.layer_types.end()) {
        // A full-attention layer's backward holds the wgmma kernels' workspace: d_o and either
        // the dS tiles or dQ's fp32 sums, at their most for a batch of T tokens.
        attention_ws =
            static_cast<int64_t>(attention_backward_workspace_bound(T, c.num_attention_heads));
    }
    // FP8 projections quantise one GEMM's operands at a time, one byte each: at most the widest
    // projection's (the MLP's) activation and gradient or its weight beside one of them.
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    const int64_t fp8_scratch = in.fp8_projections ? T * (H + I) + H * I : 0;
    const int64_t layer_phase = 2 * 2 * biggest_layer + grad_bytes * biggest_layer +
                                (none ? 0 : biggest_act) + attention_ws + fp8_scratch;
    const MemoryPlan::Item phase =
        head_phase >= layer_phase
            ? MemoryPlan::Item{absl::StrCat("embedding/LM head phase (gathered bf16 units ",
                                            gib(2 * 2 * big), " + unsharded fp32 gradient ",
                                            gib(grad_bytes * big), " + cross-entropy chunk ",
                                            gib(ce), " + labeled rows ", gib(head_rows), ")"),
                               head_phase}
            : MemoryPlan::Item{
                  absl::StrCat("layer backward phase (gathered bf16 layers ",
                               gib(2 * 2 * biggest_layer), " + unsharded fp32 gradient ",
                               gib(grad_bytes * biggest_layer), " + recomputed activations ",
                               gib(biggest_act), " + attention workspace ", gib(attention_ws),
                               fp8_scratch > 0 ? absl::StrCat(" + FP8 operands ", gib(fp8_scratch))
                                               : std::string(),
                               ")"),
                  layer_phase};
    if (lora) {
        // The adapter: fp32 master, moments and gradient, its bf16 copy, on every rank.
        plan.items = {{"bf16 frozen base (shard)", 2 * shard},
                      {"LoRA adapter (fp32 master, moments, gradient; bf16 copy)",
                       18 * in.adapter_parameters}};
    } else {
        plan.items = {{"fp32 master weights + AdamW moments (shard)", 12 * shard},
                      {"bf16 parameters (shard)", 2 * shard},
                      {"fp32 gradients (shard)", 4 * shard}};
    }
    plan.items.insert(plan.items.end(),
                      {
                          {none   ? "activations (all layers)"
                           : kept ? absl::StrCat("layer inputs (recomputed per layer; the last ",
                                                 kept, " keep their activations)")
                                  : "layer inputs (recomputed per layer)",
                           resident},
                          phase,
                          {"hidden states and their gradient", 2 * 4 * c.hidden_size * T},
                          {"CUDA context, workspaces, allocator slack", kFixedBytes},
                      });
    for (const auto& item : plan.items) plan.peak_bytes += item.bytes;
    return plan;
}

std::string MemoryPlan::describe() const {
    std::string out =
        absl::StrCat("peak ", gib(peak_bytes), " per rank (",
                     absl::StrFormat("%.2f B", double(parameters) / 1e9), " parameters) = ");
    for (size_t i = 0; i < items.size(); ++i) {
        absl::StrAppend(&out, i ? " + " : "", items[i].what, " ", gib(items[i].bytes));
    }
    return out;
}

absl::Status check_fits(const Qwen35Config& c, const MemoryPlanInput& in, int64_t device_bytes,
                        double headroom) {
    const MemoryPlan plan = plan_memory(c, in);
    const auto usable = static_cast<int64_t>(double(device_bytes) * (1.0 - headroom));
    if (plan.peak_bytes <= usable) return absl::OkStatus();
    std::string hint = "no world size up to 1024 fits: lower tokens_per_batch";
    for (int w = in.world_size + 1; w <= 1024; ++w) {
        MemoryPlanInput more = in;
        more.world_size = w;
        if (plan_memory(c, more).peak_bytes <= usable) {
            hint = absl::StrCat("it fits from ", w, " GPUs");
            break;
        }
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("MEMORY_PLAN: does not fit: ", plan.describe(), "; the device has ",
                     gib(device_bytes), " (", gib(usable), " usable) at world size ", in.world_size,
                     ", ", in.tokens_per_batch, " tokens per batch; ", hint));
}

namespace {

// The current CUDA device's memory, for the "auto" policy.
absl::StatusOr<int64_t> device_bytes_for_auto() {
#if DELTATUNE_HAVE_CUDA
    size_t free_now = 0, device_total = 0;
    DT_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_now, &device_total));
    return static_cast<int64_t>(device_total);
#else
    return absl::FailedPreconditionError("recompute auto: built without CUDA");
#endif
}

}  // namespace

absl::StatusOr<Recompute> resolve_recompute(const std::string& name, const Qwen35Config& c,
                                            const MemoryPlanInput& in) {
    if (name != "auto") return parse_recompute(name);
    DT_ASSIGN_OR_RETURN(const int64_t device, device_bytes_for_auto());
    return choose_recompute(c, in, device) == Recompute::kNone ? Recompute::kNone
                                                               : Recompute::kLayer;
}

absl::StatusOr<int64_t> resolve_kept_layers(const std::string& name, Recompute resolved,
                                            const Qwen35Config& c, const MemoryPlanInput& in) {
    if (name != "auto" || resolved != Recompute::kLayer) return 0;
    DT_ASSIGN_OR_RETURN(const int64_t device, device_bytes_for_auto());
    return choose_kept_layers(c, in, device);
}

int64_t choose_kept_layers(const Qwen35Config& c, MemoryPlanInput in, int64_t device_bytes,
                           double headroom) {
    in.recompute = Recompute::kLayer;
    int64_t lo = 0, hi = static_cast<int64_t>(c.layer_types.size());
    while (lo < hi) {  // the most that fit: plans grow with the count
        const int64_t mid = (lo + hi + 1) / 2;
        in.kept_layers = mid;
        if (check_fits(c, in, device_bytes, headroom).ok()) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

Recompute choose_recompute(const Qwen35Config& c, MemoryPlanInput in, int64_t device_bytes,
                           double headroom) {
    in.recompute = Recompute::kNone;
    return check_fits(c, in, device_bytes, headroom).ok() ? Recompute::kNone : Recompute::kLayer;
}

}  // namespace deltatune
