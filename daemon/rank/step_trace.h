// CUPTI activity tracing of training steps, for `deltatune bench` and a running job's profile
// (`deltatune profile`): the kernels with their intervals, split into compute and NCCL
// (communication) kernels, so both can report kernel launches, GPU busy time, and how much
// communication is exposed (runs while no compute kernel does). With `keep_events` also every
// kernel, memory operation and host CUDA runtime call as a record, for a timeline
// (chrome_trace_json).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace deltatune::daemon {

struct StepTrace {
    std::vector<std::pair<uint64_t, uint64_t>> compute, comm;  // [start, end) ns
    std::vector<std::pair<uint64_t, uint64_t>> memory;         // memcpy and memset [start, end) ns
    struct KernelTotal {
        int64_t launches = 0;
        uint64_t ns = 0;
    };
    std::map<std::string, KernelTotal> by_kernel;  // demangled name without arguments

    // The timeline, recorded when keep_events is set before start_trace.
    enum class Kind : uint8_t { kKernel, kNccl, kMemcpy, kMemset, kRuntime };
    struct Event {
        Kind kind;
        std::string name;             // kernel (short name), "memcpy HtoD", runtime API function
        uint32_t lane = 0;            // the stream (GPU records) or host thread (runtime calls)
        uint64_t start = 0, end = 0;  // ns, CUPTI's clock
    };
    bool keep_events = false;
    std::vector<Event> events;
};

// The trace as Chrome / Perfetto trace-event JSON: one process for the GPU (a track per stream)
// and one for the host (a track per thread), times in us from the first record. `label` names
// the GPU process (e.g. "jobs/abc rank 0").
std::string chrome_trace_json(const StepTrace& trace, const std::string& label);

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

}  // namespace deltatune::daemon
