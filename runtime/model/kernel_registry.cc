// The kernel registry: per op, the implementation this machine will run.
#include "runtime/model/kernel_registry.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/device/device_context.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune {

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

MachineInfo probe_machine() {
    MachineInfo m;
    m.attention_core = attention_core_from_env().value_or(AttentionCore::kWgmma);
    if (cuda_device_count(&m.why_no_gpu) == 0) return m;
#if DELTATUNE_HAVE_CUDA
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        cudaGetLastError();
        m.why_no_gpu = "cudaGetDeviceProperties failed";
        return m;
    }
    m.sm_version = prop.major * 10 + prop.minor;
    m.gpu_name = prop.name;
#endif
    return m;
}

const std::vector<std::string>& gdn_core_ops() {
    static const std::vector<std::string> ops = {"causal_conv1d", "l2norm", "gdn_gates",
                                                 "gated_delta_rule", "gated_rmsnorm"};
    return ops;
}

namespace {

// The file of the CPU reference an op runs on a machine without a GPU.
std::string cpu_reference_file(const std::string& op) {
    static const std::map<std::string, std::string> files = {
        {"embedding", "kernels/embedding/embedding_ref.cc"},
        {"rmsnorm_residual", "kernels/norm/rmsnorm_ref.cc"},
        {"qk_norm_rope", "kernels/norm/rmsnorm_ref.cc"},
        {"gated_attention", "kernels/attention/attention_ref.cc"},
        {"swiglu", "kernels/mlp/swiglu_ref.cc"},
        {"fused_linear_cross_entropy", "kernels/loss/cross_entropy_ref.cc"},
        {"adamw", "kernels/optim/adamw_ref.cc"},
        {"grad_norm", "runtime/train/step_runner.cc"},
        {"causal_conv1d", "kernels/gdn/causal_conv1d_ref.cc"},
        {"l2norm", "kernels/norm/l2norm_ref.cc"},
        {"gdn_gates", "kernels/gdn/gdn_gates_ref.cc"},
        {"gated_delta_rule", "kernels/gdn/gdn_chunked_rule_ref.cc"},
        {"gated_rmsnorm", "kernels/norm/gated_rmsnorm_ref.cc"},
    };
    const auto it = files.find(op);
    return it == files.end() ? "?" : it->second;
}

}  // namespace

KernelRegistry kernel_registry_for(const MachineInfo& machine, const Qwen35Config* config) {
    KernelRegistry r;
    // (op, fused file) for the ops whose fused kernel exists.
    const std::vector<std::pair<std::string, std::string>> fused = {
        {"embedding", "kernels/embedding/embedding.cu"},
        {"rmsnorm_residual", "kernels/norm/rmsnorm.cu"},
        {"qk_norm_rope", "kernels/attention/qk_norm_rope.cu"},
        {"gated_attention", "kernels/attention/attention_wgmma.cu"},
        {"swiglu", "kernels/mlp/swiglu.cu"},
        {"fused_linear_cross_entropy", "kernels/loss/fused_linear_cross_entropy.cu"},
        {"adamw", "kernels/optim/adamw.cu"},
        {"grad_norm", "kernels/optim/grad_norm.cu"},
    };
    if (machine.sm_version == 0) {
        r.device = "cpu";
        const std::string why = absl::StrCat("no GPU: ", machine.why_no_gpu);
        r.ops.push_back({"linear", KernelKind::kCpuReference, "kernels/mlp/linear_ref.cc", why});
        for (const auto& [op, file] : fused)
            r.ops.push_back({op, KernelKind::kCpuReference, cpu_reference_file(op), why});
        for (const auto& op : gdn_core_ops())
            r.ops.push_back({op, KernelKind::kCpuReference, cpu_reference_file(op), why});
        return r;
    }
    const std::string sm = absl::StrCat("sm_", machine.sm_version);
    r.device = absl::StrCat("cuda:0 (", machine.gpu_name, ", ", sm, ")");
    const bool hopper = machine.sm_version == 90;
    r.ops.push_back({"linear", KernelKind::kLibrary, "cuBLASLt (runtime/device/gemm.cc)",
                     gemm_times_candidates()
                         ? "bf16 in/out, fp32 accumulation, the fastest of cuBLASLt's top 8 "
                           "algorithms timed once per shape (DELTATUNE_GEMM=timed)"
                         : "bf16 in/out, fp32 accumulation, cuBLASLt's first heuristic algorithm "
                           "cached per shape (DELTATUNE_GEMM=timed times its top 8)"});
    for (const auto& [op, file] : fused) {
        if (!hopper) {
            r.ops.push_back({op, KernelKind::kSimple, "none",
                             absl::StrCat("kernels are built for sm_90a only; this GPU is ", sm)});
            continue;
        }
        if (op == "gated_attention" && config && config->head_dim != 256) {
            r.ops.push_back({op, KernelKind::kSimple, "kernels/attention/attention_generic.cu",
                             absl::StrCat("head_dim ", config->head_dim,
                                          ": the flash kernel serves head_dim 256 only")});
            continue;
        }
        if (op == "gated_attention" && machine.attention_core == AttentionCore::kCudnn) {
            r.ops.push_back({op, KernelKind::kLibrary,
                             "cuDNN fused flash attention (kernels/attention/attention_cudnn.cc) + "
                             "kernels/attention/attention_gate.cu (sm_90a)",
                             "DELTATUNE_ATTENTION=cudnn: cuDNN's SDPA both ways, the gate in "
                             "passes of its own"});
            continue;
        }
        if (op == "gated_attention" && machine.attention_core == AttentionCore::kFlash) {
            r.ops.push_back({op, KernelKind::kFused,
                             "kernels/attention/attention_flash.cu (sm_90a)",
                             "DELTATUNE_ATTENTION=flash: handwritten on mma.sync both ways, "
                             "bitwise deterministic, 3-7x slower"});
            continue;
        }
        if (op == "gated_attention") {  // "wgmma", the default
            r.ops.push_back({op, KernelKind::kFused,
                             "kernels/attention/attention_wgmma.cu forward + "
                             "kernels/attention/attention_wgmma_backward.cu (sm_90a)",
                             "wgmma + TMA both ways, the gate fused: faster than cuDNN's SDPA with "
                             "the gate's passes on packed batches; the backward deterministic "
                             "while its dS tiles fit 4 GiB"});
            continue;
        }
        r.ops.push_back(
            {op, KernelKind::kFused, absl::StrCat(file, " (sm_90a)"), "fused kernel for this GPU"});
    }
    // The fused GDN kernels serve linear key/value head dims 128 (the shape check of
    // gated_delta_rule_supported, here without the CUDA header so that CPU builds answer the
    // same); the block (gpu_gdn_block.cc, gpu_gdn_fused) falls back to kernels/gdn/gdn_simple.cu.
    bool gdn_fused = hopper;
    std::string gdn_why = absl::StrCat("kernels are built for sm_90a only; this GPU is ", sm);
    if (hopper && config) {
        const int64_t hk = config->linear_num_key_heads, hv = config->linear_num_value_heads;
        gdn_fused = config->linear_key_head_dim == 128 && config->linear_value_head_dim == 128 &&
                    hk > 0 && hv > 0 && hv % hk == 0;
        gdn_why = absl::StrCat("linear head dims ", config->linear_key_head_dim, "/",
                               config->linear_value_head_dim,
                               ": the fused GDN kernels serve 128/128 only");
    }
    for (const auto& op : gdn_core_ops()) {
        if (!gdn_fused) {
            r.ops.push_back({op, KernelKind::kSimple, "kernels/gdn/gdn_simple.cu", gdn_why});
            continue;
        }
        std::string file = op == "causal_conv1d"   ? "kernels/gdn/causal_conv1d.cu"
                           : op == "gated_rmsnorm" ? "kernels/norm/gated_rmsnorm.cu"
                                                   : "kernels/gdn/gdn_chunked_rule.cu";
        std::string why = op == "l2norm" || op == "gdn_gates"
                              ? "fused into the chunked gated delta rule"
                              : "fused kernel for this GPU";
        r.ops.push_back({op, KernelKind::kFused, absl::StrCat(file, " (sm_90a)"), why});
    }
    return r;
}

absl::Status check_strict(const KernelRegistry& registry,
                          const std::vector<std::string>& allow_non_fused) {
    std::vector<std::string> bad;
    for (const KernelChoice& k : registry.ops) {
        if (k.kind == KernelKind::kFused || k.kind == KernelKind::kLibrary) continue;
        if (std::find(allow_non_fused.begin(), allow_non_fused.end(), k.op) !=
            allow_non_fused.end())
            continue;
        bad.push_back(absl::StrCat(k.op, " -> ", kernel_kind_name(k.kind), ": ", k.implementation,
                                   " (", k.why, ")"));
    }
    if (bad.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("strict mode: ", bad.size(), " op(s) on ", registry.device,
                     " would not run their fused kernel: ", absl::StrJoin(bad, "; ")));
}

absl::Status check_strict(const KernelRegistry& registry) {
    return check_strict(registry, {});
}

std::string format_registry(const KernelRegistry& registry) {
    std::string out = absl::StrCat("device: ", registry.device, "\n");
    for (const KernelChoice& k : registry.ops) {
        absl::StrAppend(&out, absl::StrFormat("%-28s %-14s %-44s %s\n", k.op,
                                              kernel_kind_name(k.kind), k.implementation, k.why));
    }
    return out;
}

}  // namespace deltatune
