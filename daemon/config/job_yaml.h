// Job files (configs/jobs/*.yaml) -> deltatune.v1.JobSpec, and the checks every JobSpec passes
// before the daemon accepts it, whether it came from YAML or over gRPC (one schema, one check):
//   parse_job_yaml (field names identical to the proto, unknown keys rejected with their path,
//   depth/list/size bounds) -> normalize_job_spec (documented defaults) -> validate_job_spec
//   (cross-field rules quoting the values) -> resolve_job_paths (symlink-resolved, under roots).
// Error messages start with an ErrorInfo-style reason: "INVALID_CONFIG: ...", "PATH_NOT_ALLOWED:".
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/daemon_config.h"
#include "deltatune/v1/job.pb.h"
#include "runtime/model/kernel_registry.h"
#include "runtime/model/qwen35_config.h"
#include "yaml-cpp/yaml.h"

namespace deltatune::daemon {

// Parses YAML text under the byte, depth and list bounds; `what` names the document in errors.
// Size over the bound is RESOURCE_EXHAUSTED, anything else INVALID_ARGUMENT.
absl::StatusOr<YAML::Node> load_yaml_bounded(std::string_view text, const InputLimits& limits,
                                             const std::string& what);

struct ParsedJobSpec {
    v1::JobSpec spec;
    std::set<std::string> present;  // dotted paths given explicitly, e.g. "hyperparameters.beta1"
};

// Maps a YAML job document onto JobSpec by proto reflection. Enums take the full name
// ("LR_SCHEDULE_LINEAR") or the short one, any case ("linear"); null values count as absent.
absl::StatusOr<ParsedJobSpec> parse_job_yaml(std::string_view text, const InputLimits& limits);

// Fills the defaults documented in job.proto. A zero value means "default" unless its dotted path
// is in `present` (YAML can say `max_restarts: 0`) or the field is declared `optional` and set.
// Plain proto3 scalars cannot tell 0 from unset over gRPC, so there 0 means the default for
// fields whose default is not 0 (min_lr_ratio, beta1, beta2, max_grad_norm, max_restarts).
void normalize_job_spec(v1::JobSpec* spec, const std::set<std::string>* present = nullptr);

// Cross-field rules on a normalized spec; INVALID_ARGUMENT "INVALID_CONFIG: <rule with values>".
absl::Status validate_job_spec(const v1::JobSpec& spec, const InputLimits& limits);

// Rewrites model, tokenizer, data files and output_dir to their symlink-resolved absolute paths
// and checks each lies strictly beneath a root of its kind. Escapes (via "..", absolute paths or
// symlinks) are INVALID_ARGUMENT "PATH_NOT_ALLOWED: ..."; a missing model or data file (inside
// the roots) is INVALID_ARGUMENT "DATASET_NOT_FOUND: ..." / "INVALID_CONFIG: ...".
absl::Status resolve_job_paths(v1::JobSpec* spec, const PathRoots& roots);

// The symlink-resolved forms of the roots that exist (what a rank's sandbox opens).
std::vector<std::string> existing_resolved_roots(const std::vector<std::string>& roots);

// GPU jobs: the memory planner's prediction for one rank (model config.json, world size = gpus,
// tokens_per_batch, per-layer recompute) must fit `gpu_memory_bytes`; RESOURCE_EXHAUSTED
// "MEMORY_PLAN: ..." with the breakdown otherwise; a job asking for more GPUs than the daemon's
// `gpus_available` is FAILED_PRECONDITION "GPUS_UNAVAILABLE: ..." (never a silent CPU
// fallback), and so is, as "NON_FUSED_KERNEL: ...", a job an op of which would run on anything
// but its fused kernel or cuBLASLt here, unless kernels.allow_non_fused names the op (strict
// mode, runtime/model/kernel_registry.h). CPU jobs always pass.
absl::Status check_job_memory(const v1::JobSpec& spec, int64_t gpu_memory_bytes,
                              int gpus_available);
// The strict-kernel part of check_job_memory for `machine`: a GPU rank on a node agent runs it
// on its own machine at start.
absl::Status check_kernels_on(const MachineInfo& machine, const Qwen35Config& config,
                              const v1::JobSpec& spec);

// What CPU jobs are admitted against (scheduler.cpu_* in the daemon config).
struct CpuBudget {
    int cores = 1;
    int64_t memory_bytes = 0;
    int64_t rank_memory_bytes = int64_t{1} << 30;  // one CPU rank's expected peak
};
// This machine's cores and memory (the cgroup's limit where it is lower), with the config's
// overrides (-1 = detect).
CpuBudget cpu_budget(int cores, double memory_gib, double rank_memory_gib);
// CPU jobs: FAILED_PRECONDITION "CPUS_UNAVAILABLE: ..." for more ranks than cores,
// RESOURCE_EXHAUSTED "MEMORY_PLAN: ..." when the ranks' memory exceeds the machine's. GPU jobs
// pass (check_job_memory admits them).
absl::Status check_cpu_admission(const v1::JobSpec& spec, const CpuBudget& budget);

// normalize -> validate -> resolve paths: what CreateJob applies to an incoming spec.
absl::Status prepare_job_spec(v1::JobSpec* spec, const PathRoots& roots, const InputLimits& limits);

}  // namespace deltatune::daemon
