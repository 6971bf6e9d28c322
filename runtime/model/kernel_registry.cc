// The kernel registry: per op, the implementation this machine will run, as kernel_choice.cc
// chooses it.
#include "runtime/model/kernel_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/device/device_context.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune {

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
    m.gpu_name = prop.name;
    absl::StatusOr<GpuArch> gpu = probe_gpu_arch(0);
    if (!gpu.ok()) {
        m.why_no_gpu = std::string(gpu.status().message());
        return m;
    }
    m.gpu = *gpu;
#endif
    return m;
}

KernelRegistry kernel_registry_for(const MachineInfo& machine, const Qwen35Config* config) {
    KernelRegistry r;
    if (machine.gpu.sm_version == 0) {
        r.device = "cpu";
        r.ops = cpu_kernel_choices(absl::StrCat("no GPU: ", machine.why_no_gpu));
        return r;
    }
    r.device = absl::StrCat("cuda:0 (", machine.gpu_name, ", sm_", machine.gpu.sm_version, ")");
    r.ops = gpu_kernel_choices({machine.gpu, machine.attention_core, config});
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
