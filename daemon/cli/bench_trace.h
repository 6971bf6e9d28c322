// CUPTI activity tracing for `deltatune bench`: the kernels of one profiled step with their
// intervals, split into compute and NCCL (communication) kernels, so the bench can report kernel
// launches per step, GPU busy time, and how much communication is exposed (runs while no compute
// kernel does).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace deltatune::cli {

struct StepTrace {
    std::vector<std::pair<uint64_t, uint64_t>> compute, comm;  // [start, end) ns
    int64_t memops = 0;                                        // memcpy and memset records
    struct KernelTotal {
        int64_t launches = 0;
        uint64_t ns = 0;
    };
    std::map<std::string, KernelTotal> by_kernel;  // demangled name without arguments
};

// Starts recording into `trace` (one at a time); stop() flushes and detaches. No-op result when
// CUPTI cannot be enabled (then the trace stays empty).
absl::Status start_trace(StepTrace* trace);
void stop_trace();

// The `n` kernels with the most GPU time: [name, launches, ms] each.
std::vector<std::tuple<std::string, int64_t, double>> top_kernels(const StepTrace& trace, size_t n);

// The profiled step's kernel time by part, ms: "gemm" (cuBLASLt), "gdn" (the Gated DeltaNet
// kernels: conv, chunk prep, recurrences, state gradients, gates, gated RMSNorm, l2norm),
// "attention" (attention cores, gate, q/k norm + RoPE), "optimizer" (AdamW, gradient norm),
// "loss" (the fused cross-entropy's own kernels), "nccl", and "other".
std::map<std::string, double> kernel_ms_by_part(const StepTrace& trace);

// Length of the union of the intervals, ms.
double union_ms(std::vector<std::pair<uint64_t, uint64_t>> spans);
// Length of the part of the union of `a` not covered by the union of `b`, ms.
double uncovered_ms(std::vector<std::pair<uint64_t, uint64_t>> a,
                    std::vector<std::pair<uint64_t, uint64_t>> b);

}  // namespace deltatune::cli
