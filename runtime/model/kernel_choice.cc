// The kernel choices and the one table of what each implementation is (kernels/README.md says
// when each runs, family by family).
#include "runtime/model/kernel_choice.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "kernels/attention/attention.h"
#include "kernels/common/code_arch.h"
#include "kernels/gdn/gdn_chunked_rule.h"
#include "runtime/device/linear_fp8.h"

namespace deltatune {

namespace {

constexpr const char* kFusedWhy = "fused kernel for this GPU";

// What the report names for one op's implementation: kind, files and why it runs (the choice's
// own line, for fallbacks, replaces `why`). A null op matches every op. Rows naming a CUDA file
// get the code that runs appended (code_label).
struct ImplRow {
    const char* op;
    KernelImpl impl;
    KernelKind kind;
    const char* files;
    const char* why;
};

constexpr ImplRow kImplRows[] = {
    {"linear", KernelImpl::kCpuReference, KernelKind::kCpuReference, "kernels/mlp/linear_ref.cc",
     ""},
    {"linear", KernelImpl::kCublasLt, KernelKind::kLibrary, "cuBLASLt (runtime/device/gemm.cc)",
     ""},
    {"embedding", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "kernels/embedding/embedding_ref.cc", ""},
    {"embedding", KernelImpl::kOnly, KernelKind::kFused, "kernels/embedding/embedding.cu",
     kFusedWhy},
    {"rmsnorm_residual", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "kernels/norm/rmsnorm_ref.cc", ""},
    {"rmsnorm_residual", KernelImpl::kOnly, KernelKind::kFused, "kernels/norm/rmsnorm.cu",
     kFusedWhy},
    {"qk_norm_rope", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "kernels/norm/rmsnorm_ref.cc + kernels/attention/rope_ref.cc", ""},
    {"qk_norm_rope", KernelImpl::kOnly, KernelKind::kFused, "kernels/attention/qk_norm_rope.cu",
     kFusedWhy},
    {"gated_attention", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "kernels/attention/attention_ref.cc", ""},
    {"gated_attention", KernelImpl::kAttentionWgmma, KernelKind::kFused,
     "kernels/attention/attention_wgmma.cu forward + kernels/attention/attention_wgmma_backward.cu",
     "wgmma + TMA both ways, the gate fused: faster than cuDNN's SDPA with the gate's passes on "
     "packed batches; the backward deterministic while its dS tiles fit 4 GiB"},
    {"gated_attention", KernelImpl::kAttentionCudnn, KernelKind::kLibrary,
     "cuDNN fused flash attention (kernels/attention/attention_cudnn.cc) + "
     "kernels/attention/attention_gate.cu",
     "DELTATUNE_ATTENTION=cudnn: cuDNN's SDPA both ways, the gate in passes of its own"},
    {"gated_attention", KernelImpl::kAttentionFlash, KernelKind::kFused,
     "kernels/attention/attention_flash.cu",
     "DELTATUNE_ATTENTION=flash: handwritten on mma.sync both ways, bitwise deterministic, 3-7x "
     "slower"},
    {"gated_attention", KernelImpl::kAttentionGeneric, KernelKind::kSimple,
     "kernels/attention/attention_generic.cu", ""},
    {"swiglu", KernelImpl::kCpuReference, KernelKind::kCpuReference, "kernels/mlp/swiglu_ref.cc",
     ""},
    {"swiglu", KernelImpl::kOnly, KernelKind::kFused, "kernels/mlp/swiglu.cu", kFusedWhy},
    {"fused_linear_cross_entropy", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "kernels/loss/cross_entropy_ref.cc", ""},
    {"fused_linear_cross_entropy", KernelImpl::kOnly, KernelKind::kFused,
     "kernels/loss/fused_linear_cross_entropy.cu", kFusedWhy},
    {"adamw", KernelImpl::kCpuReference, KernelKind::kCpuReference, "kernels/optim/adamw_ref.cc",
     ""},
    {"adamw", KernelImpl::kOnly, KernelKind::kFused, "kernels/optim/adamw.cu", kFusedWhy},
    {"grad_norm", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "runtime/optim/cpu_update.cc", ""},
    {"grad_norm", KernelImpl::kOnly, KernelKind::kFused, "kernels/optim/grad_norm.cu", kFusedWhy},
    {"causal_conv1d", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "kernels/gdn/causal_conv1d_ref.cc", ""},
    {"causal_conv1d", KernelImpl::kGdnChunked, KernelKind::kFused, "kernels/gdn/causal_conv1d.cu",
     kFusedWhy},
    {"l2norm", KernelImpl::kCpuReference, KernelKind::kCpuReference, "kernels/norm/l2norm_ref.cc",
     ""},
    {"l2norm", KernelImpl::kGdnChunked, KernelKind::kFused, "kernels/gdn/gdn_chunked_rule.cu",
     "fused into the chunked gated delta rule"},
    {"gdn_gates", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "kernels/gdn/gdn_gates_ref.cc", ""},
    {"gdn_gates", KernelImpl::kGdnChunked, KernelKind::kFused, "kernels/gdn/gdn_chunked_rule.cu",
     "fused into the chunked gated delta rule"},
    {"gated_delta_rule", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "kernels/gdn/gdn_chunked_rule_ref.cc", ""},
    {"gated_delta_rule", KernelImpl::kGdnChunked, KernelKind::kFused,
     "kernels/gdn/gdn_chunked_rule.cu", kFusedWhy},
    {"gated_rmsnorm", KernelImpl::kCpuReference, KernelKind::kCpuReference,
     "kernels/norm/gated_rmsnorm_ref.cc", ""},
    {"gated_rmsnorm", KernelImpl::kGdnChunked, KernelKind::kFused, "kernels/norm/gated_rmsnorm.cu",
     kFusedWhy},
    {nullptr, KernelImpl::kGdnSimple, KernelKind::kSimple, "kernels/gdn/gdn_simple.cu", ""},
    {nullptr, KernelImpl::kNotBuilt, KernelKind::kSimple, "none", ""},
};

ImplChoice not_built(const KernelTarget& t) {
    if (t.gpu.sm_version < kPortableCodeArch) {
        return {KernelImpl::kNotBuilt,
                absl::StrCat("sm_", t.gpu.sm_version, ": the kernels need sm_80 or newer")};
    }
    return {KernelImpl::kNotBuilt,
            absl::StrCat("this build holds no kernel code for sm_", t.gpu.sm_version,
                         " (DELTATUNE_CUDA_TARGETS=all builds every supported GPU's)")};
}

bool hopper_code(const KernelTarget& t) {
    return t.gpu.code_arch >= kHopperCodeArch;
}

// The code a CUDA kernel runs as: "sm_90a", "sm_80", or the portable code as a newer GPU's SASS.
std::string code_label(const GpuArch& g) {
    if (g.code_arch >= kHopperCodeArch) return "sm_90a";
    if (g.code_binary == kPortableCodeArch || g.code_binary == 0) return "sm_80";
    return absl::StrCat("compute_80 as sm_", g.code_binary);
}

std::string kib(int64_t bytes) {
    return absl::StrCat(bytes / 1024, " KiB");
}

// cuBLASLt on any GPU; which of its algorithms is the device context's Gemm's choice.
ImplChoice choose_linear(const KernelTarget&) {
    return {KernelImpl::kCublasLt,
            gemm_times_candidates()
                ? "bf16 in/out, fp32 accumulation, the fastest of cuBLASLt's top 8 algorithms "
                  "timed once per shape (DELTATUNE_GEMM=timed)"
                : "bf16 in/out, fp32 accumulation, cuBLASLt's first heuristic algorithm cached per "
                  "shape (DELTATUNE_GEMM=timed times its top 8)"};
}

// Ops with one kernel, which the model calls directly.
ImplChoice choose_only(const KernelTarget& t) {
    return t.gpu.code_arch != 0 ? ImplChoice{KernelImpl::kOnly, ""} : not_built(t);
}

// Every op of a step in the report's order, with the function that chooses its implementation.
struct OpSpec {
    const char* op;
    ImplChoice (*choose)(const KernelTarget&);
};

constexpr OpSpec kOps[] = {
    {"linear", choose_linear},
    {"embedding", choose_only},
    {"rmsnorm_residual", choose_only},
    {"qk_norm_rope", choose_only},
    {"gated_attention", choose_attention},
    {"swiglu", choose_only},
    {"fused_linear_cross_entropy", choose_only},
    {"adamw", choose_only},
    {"grad_norm", choose_only},
    {"causal_conv1d", choose_gdn_core},
    {"l2norm", choose_gdn_core},
    {"gdn_gates", choose_gdn_core},
    {"gated_delta_rule", choose_gdn_core},
    {"gated_rmsnorm", choose_gdn_core},
};

KernelChoice describe(const char* op, const ImplChoice& c, const GpuArch& gpu) {
    for (const ImplRow& row : kImplRows) {
        if (row.impl != c.impl || (row.op && std::string_view(row.op) != op)) continue;
        std::string files = row.files;
        if (files.find(".cu") != std::string::npos && row.kind != KernelKind::kCpuReference) {
            absl::StrAppend(&files, " (", code_label(gpu), ")");
        }
        return {op, row.kind, files, c.why.empty() ? row.why : c.why};
    }
    return {op, KernelKind::kSimple, "?", "no row in kernel_choice.cc's table"};
}

}  // namespace

const char* kernel_kind_name(KernelKind k) {
    switch (k) {
        case KernelKind::kFused:
            return "fused";
        case KernelKind::kLibrary:
            return "library";
        case KernelKind::kSimple:
            return "simple";
        case KernelKind::kCpuReference:
            return "cpu reference";
    }
    return "?";
}

ImplChoice choose_attention(const KernelTarget& t) {
    if (t.gpu.code_arch == 0) return not_built(t);
    if (t.config && t.config->head_dim != 256) {
        return {KernelImpl::kAttentionGeneric,
                absl::StrCat("head_dim ", t.config->head_dim,
                             ": the fused attention cores serve head_dim 256 only")};
    }
    if (t.attention_core == AttentionCore::kCudnn) return {KernelImpl::kAttentionCudnn, ""};
    if (t.attention_core == AttentionCore::kWgmma && hopper_code(t)) {
        return {KernelImpl::kAttentionWgmma, ""};
    }
    if (t.gpu.smem_per_block < kAttentionFlashSmemBytes) {
        return {KernelImpl::kAttentionGeneric,
                absl::StrCat("the flash kernels need ", kib(kAttentionFlashSmemBytes),
                             " of shared memory per block; this GPU gives ",
                             kib(t.gpu.smem_per_block))};
    }
    if (t.attention_core == AttentionCore::kFlash) return {KernelImpl::kAttentionFlash, ""};
    return {KernelImpl::kAttentionFlash,
            absl::StrCat("the wgmma core needs the sm_90a code; on sm_", t.gpu.sm_version,
                         " the portable flash kernel on mma.sync, fused and deterministic")};
}

// The config-level part of the chunked kernels' own checks (gated_delta_rule_supported,
// causal_conv1d_supported, gated_rmsnorm_supported at 0 tokens), which exist in CUDA builds only;
// kernel_choice_test checks that the two agree.
ImplChoice choose_gdn_core(const KernelTarget& t) {
    if (t.gpu.code_arch == 0) return not_built(t);
    if (!hopper_code(t) && t.gpu.smem_per_block < kGatedDeltaRulePortableSmemBytes) {
        return {KernelImpl::kGdnSimple, absl::StrCat("the chunked kernels' mma.sync form needs ",
                                                     kib(kGatedDeltaRulePortableSmemBytes),
                                                     " of shared memory per block; this GPU gives ",
                                                     kib(t.gpu.smem_per_block))};
    }
    if (!t.config) return {KernelImpl::kGdnChunked, ""};
    const Qwen35Config& c = *t.config;
    const int64_t hk = c.linear_num_key_heads, hv = c.linear_num_value_heads;
    if (c.linear_key_head_dim != 128 || c.linear_value_head_dim != 128) {
        return {KernelImpl::kGdnSimple, absl::StrCat("linear head dims ", c.linear_key_head_dim,
                                                     "/", c.linear_value_head_dim,
                                                     ": the fused GDN kernels serve 128/128 only")};
    }
    if (hk <= 0 || hv <= 0 || hv % hk != 0 || hv >= 65536) {
        return {KernelImpl::kGdnSimple,
                absl::StrCat("linear heads ", hk, "/", hv,
                             ": the chunked rule needs value heads a multiple of key heads, "
                             "fewer than 65536")};
    }
    if (c.linear_conv_kernel_dim < 1 || c.linear_conv_kernel_dim > 4) {
        return {KernelImpl::kGdnSimple,
                absl::StrCat("linear conv kernel ", c.linear_conv_kernel_dim,
                             ": the fused causal conv1d serves 1 to 4")};
    }
    if (hopper_code(t)) return {KernelImpl::kGdnChunked, ""};
    return {KernelImpl::kGdnChunked,
            "fused; without the sm_90a code every recurrence runs on mma.sync (32-column blocks)"};
}

const std::vector<std::string>& gdn_core_ops() {
    static const std::vector<std::string> ops = [] {
        std::vector<std::string> v;
        for (const OpSpec& s : kOps)
            if (s.choose == choose_gdn_core) v.emplace_back(s.op);
        return v;
    }();
    return ops;
}

std::vector<KernelChoice> gpu_kernel_choices(const KernelTarget& t) {
    std::vector<KernelChoice> out;
    for (const OpSpec& s : kOps) out.push_back(describe(s.op, s.choose(t), t.gpu));
    return out;
}

std::vector<KernelChoice> cpu_kernel_choices(const std::string& why) {
    std::vector<KernelChoice> out;
    for (const OpSpec& s : kOps) {
        out.push_back(describe(s.op, {KernelImpl::kCpuReference, why}, GpuArch{}));
    }
    return out;
}

std::vector<std::string> fp8_projection_modules(const Qwen35Config& c, const GpuArch& gpu) {
    const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
    const int64_t q = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
    const struct {
        const char* module;
        int64_t in, out;
    } projections[] = {{"q_proj", H, 2 * q},
                       {"k_proj", H, kv},
                       {"v_proj", H, kv},
                       {"o_proj", q, H},
                       {"gate_proj", H, I},
                       {"up_proj", H, I},
                       {"down_proj", I, H},
                       {"in_proj_qkv", H, 2 * c.key_dim() + c.value_dim()},
                       {"in_proj_z", H, c.value_dim()},
                       {"out_proj", c.value_dim(), H}};
    std::vector<std::string> out;
    for (const auto& p : projections) {
        if (fp8_linear_supported(gpu.sm_version, p.in, p.out)) out.push_back(p.module);
    }
    return out;
}

}  // namespace deltatune
