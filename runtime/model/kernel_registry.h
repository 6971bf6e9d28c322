// Which implementation each op of the training step uses on this machine, and why: the answer
// `deltatune kernels` prints and strict-mode validation checks. A job in strict mode (the
// default) must fail at validation when an op would run on anything but its fused kernel (or a
// cuBLAS/cuBLASLt call); check_strict says which ops and why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/device/device_context.h"
#include "runtime/model/kernel_choice.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

struct KernelRegistry {
    std::string device;  // "cuda:0 (NVIDIA H200, sm_90)" or "cpu"
    std::vector<KernelChoice> ops;
};

// The machine as the registry sees it: gpu.sm_version 0 means no usable CUDA device;
// `why_no_gpu` then says why.
struct MachineInfo {
    GpuArch gpu;  // cuda:0
    // From DELTATUNE_ATTENTION (kWgmma when it names no core: a GPU context then refuses to
    // start, saying why).
    AttentionCore attention_core = AttentionCore::kWgmma;
    std::string gpu_name;
    std::string why_no_gpu;
};
MachineInfo probe_machine();

// The choice for every op of a Qwen3.5 training step on `machine`, as the run time makes it
// (kernel_choice.h). `config` (may be null) adds shape checks, e.g. the fused attention cores
// serve head_dim 256 only.
KernelRegistry kernel_registry_for(const MachineInfo& machine, const Qwen35Config* config);

// OK when every op is kFused or kLibrary, or is named in `allow_non_fused`; otherwise
// FailedPrecondition naming each offending op, its implementation and why.
absl::Status check_strict(const KernelRegistry& registry,
                          const std::vector<std::string>& allow_non_fused);
absl::Status check_strict(const KernelRegistry& registry);

// One line per op, aligned, for `deltatune kernels`.
std::string format_registry(const KernelRegistry& registry);

}  // namespace deltatune
