// Admission of a validated job on this daemon: GPU jobs against the memory planner, the GPU
// count and strict kernels; CPU jobs against the cores and memory (declared in job_yaml.h).
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/config/job_yaml.h"
#include "daemon/config/spec_to_config.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/linear_fp8.h"
#include "runtime/model/lora.h"
#include "runtime/train/memory_plan.h"

namespace deltatune::daemon {

absl::Status check_job_memory(const v1::JobSpec& spec, int64_t gpu_memory_bytes,
                              int gpus_available) {
    if (spec.resources().gpus() <= 0) return absl::OkStatus();
    const std::string path = spec.model() + "/config.json";
    absl::StatusOr<Qwen35Config> config = load_qwen35_config(path);
    if (!config.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("INVALID_CONFIG: model: ", config.status().message()));
    }
    // The machine as this daemon sees it; its ranks inherit the daemon's environment, so their
    // contexts resolve the same attention core.
    const MachineInfo machine = probe_machine();
    MemoryPlanInput in;
    in.world_size = spec.resources().gpus();
    in.tokens_per_batch = spec.hyperparameters().tokens_per_batch();
    in.attention_core = machine.attention_core;
    if (machine.gpu.sm_version != 0) in.gpu = machine.gpu;  // else node agents' GPUs: Hopper
    if (spec.adapter().type() == "lora") {  // the base frozen: the plan counts the adapter
        in.adapter_parameters = count_lora_parameters(*config, lora_spec_from(spec.adapter()));
    }
    in.fp8_projections = spec.precision().projections() == "fp8";
    if (in.fp8_projections && machine.gpu.sm_version != 0 &&
        !fp8_gpu_supported(machine.gpu.sm_version)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "INVALID_CONFIG: precision.projections: fp8 needs a Hopper GPU (sm_90: per-row FP8 "
            "scales); this machine's GPU is sm_",
            machine.gpu.sm_version));
    }
    DT_RETURN_IF_ERROR(check_fits(*config, in, gpu_memory_bytes));
    // Never a silent CPU fallback: a GPU job this daemon cannot place is refused (one placed on
    // node agents waits for them instead).
    if (spec.resources().nodes() == 0 && spec.resources().gpus() > gpus_available) {
        return absl::FailedPreconditionError(
            absl::StrCat("GPUS_UNAVAILABLE: resources.gpus (", spec.resources().gpus(),
                         ") exceeds the ", gpus_available,
                         " GPU(s) of this daemon (scheduler.gpus, or the visible CUDA devices)"));
    }
    // Strict kernels, judged where the ranks run: here, or on the node agents when this machine
    // has no GPU (each GPU rank checks its own machine again at start).
    if (spec.resources().nodes() > 0 && machine.gpu.sm_version == 0) return absl::OkStatus();
    return check_kernels_on(machine, *config, spec);
}

absl::Status check_kernels_on(const MachineInfo& machine, const Qwen35Config& config,
                              const v1::JobSpec& spec) {
    // Never a slow fallback the user did not ask for.
    const KernelRegistry registry = kernel_registry_for(machine, &config);
    const auto& allowed = spec.kernels().allow_non_fused();
    for (int i = 0; i < allowed.size(); ++i) {
        const bool known = std::any_of(registry.ops.begin(), registry.ops.end(),
                                       [&](const KernelChoice& k) { return k.op == allowed[i]; });
        if (!known) {
            std::vector<std::string> ops;
            for (const KernelChoice& k : registry.ops) ops.push_back(k.op);
            return absl::InvalidArgumentError(
                absl::StrCat("INVALID_CONFIG: kernels.allow_non_fused[", i, "]: unknown op '",
                             allowed[i], "'; the ops are ", absl::StrJoin(ops, ", ")));
        }
    }
    const absl::Status strict =
        check_strict(registry, std::vector<std::string>(allowed.begin(), allowed.end()));
    if (!strict.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("NON_FUSED_KERNEL: ", strict.message(),
                         ". Name the ops under kernels.allow_non_fused to run them anyway"));
    }
    return absl::OkStatus();
}

CpuBudget cpu_budget(int cores, double memory_gib, double rank_memory_gib) {
    constexpr double kGiB = double(int64_t{1} << 30);
    CpuBudget b;
    b.cores =
        cores >= 0 ? cores : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    std::ifstream cgroup("/sys/fs/cgroup/memory.max");  // "max" or bytes, cgroup v2
    int64_t limit = 0;
    if (cgroup >> limit && limit > 0) memory = std::min(memory, limit);
    b.memory_bytes = memory_gib >= 0 ? static_cast<int64_t>(memory_gib * kGiB) : memory;
    b.rank_memory_bytes = static_cast<int64_t>(rank_memory_gib * kGiB);
    return b;
}

absl::Status check_cpu_admission(const v1::JobSpec& spec, const CpuBudget& budget) {
    if (spec.resources().gpus() > 0 || spec.resources().nodes() > 0) return absl::OkStatus();
    const int ranks = spec.resources().cpu_ranks();
    if (ranks > budget.cores) {
        return absl::FailedPreconditionError(
            absl::StrCat("CPUS_UNAVAILABLE: resources.cpu_ranks (", ranks, ") exceeds the ",
                         budget.cores, " cores of this daemon (scheduler.cpu_cores)"));
    }
    constexpr double kGiB = double(int64_t{1} << 30);
    const int64_t need = ranks * budget.rank_memory_bytes;
    if (need > budget.memory_bytes) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "MEMORY_PLAN: resources.cpu_ranks (%d) x %.2f GiB per rank "
            "(scheduler.cpu_rank_memory_gib) = %.2f GiB, more than the %.2f GiB of this daemon "
            "(scheduler.cpu_memory_gib)",
            ranks, budget.rank_memory_bytes / kGiB, need / kGiB, budget.memory_bytes / kGiB));
    }
    return absl::OkStatus();
}

}  // namespace deltatune::daemon
