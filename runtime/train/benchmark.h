// The training-step benchmark behind `deltatune bench` (docs/performance.md): the GPU engine
// daemon jobs train with (GpuTrainEngine: Qwen35GpuModel over FsdpGpuParams, FSDP over NCCL;
// world size 1 is one GPU), its parameters random-initialised on the device (nothing staged on
// the host), fed synthetic packed batches and stepped by the trainer's own step
// (run_train_step), so its figures are what a job gets. The command around it parses flags,
// traces the profiled step and writes the JSON; this knows nothing of either.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/model/qwen35_config.h"
#include "runtime/train/trainer.h"

namespace deltatune {

struct BenchmarkConfig {
    std::string model_config;  // a Hugging Face config.json: the shape trained
    int64_t layers = 0;        // > 0: that many layers (with_layers); 0: the config's
    // What a job sets, read as the trainer reads it: tokens_per_batch, grad_accum (micro-batches
    // per rank and step), lr (the schedule, at each step), adamw, max_grad_norm, lora (an
    // adapter on the frozen base, initialised from `seed` as a LoRA job's), seed (parameters
    // and data) and gpu (rank, world size, rendezvous, timeout, recompute policy).
    TrainConfig train;
    int64_t warmup = 2;  // untimed steps first
    int64_t steps = 5;   // timed steps; one profiled step follows them
    // > 0: BenchmarkResult::sample holds every sample_stride-th element of every parameter's
    // fp32 master after the last step (full fine-tuning only).
    int64_t sample_stride = 0;
    // Per document, the leading share of its tokens left unlabeled: 0, every token trained; a
    // chat SFT's system and user turns (kChatPromptFraction) for `deltatune bench --workload chat`.
    double prompt_fraction = 0;
};

// The unlabeled share of ultrachat-style chat data (its prompts), as the chat workload has it.
inline constexpr double kChatPromptFraction = 0.3;

// Around the profiled (last) step, e.g. to trace it; and when a collective failed and aborted
// the communicator, before the error returns (tearing down streams that hold never-ending
// collectives may block, so the caller may want to end the process there).
struct BenchmarkHooks {
    std::function<void()> before_profiled_step = [] {};
    std::function<void()> after_profiled_step = [] {};
    std::function<void(const absl::Status&)> on_abort = [](const absl::Status&) {};
};

struct BenchmarkResult {
    Qwen35Config model;       // the shape trained (layers applied)
    std::string engine;       // TrainEngine::name()
    std::string recompute;    // the policy in force (the requested one resolved)
    int64_t kept_layers = 0;  // layers whose activations stay under per-layer recompute
    int64_t adapter_params = 0;
    double init_s = 0;  // the engine's creation: device, NCCL, parameters
    // Every step, warmup and profiled included: mean loss over the step's trained targets of
    // every rank, gradient norm before clipping.
    std::vector<double> losses, grad_norms;
    // The timed steps on this rank: wall time from an idle device to the last kernel, the host's
    // share (until run_train_step returned with the whole step enqueued), real tokens per
    // second and model FLOPs utilisation.
    std::vector<double> step_ms, host_enqueue_ms, tokens_per_s, mfu;
    double timed_tokens = 0;  // real tokens of this rank's timed steps
    double profiled_step_ms = 0, profiled_step_tokens = 0;
    // The GEMM wrapper's host cost per step over the timed steps and the profiled one.
    double gemm_calls_per_step = 0, gemm_heuristic_queries_per_step = 0;
    double gemm_host_ms_per_step = 0;
    int64_t peak_device_bytes = 0;  // the most the model has held
    int64_t device_used_bytes = 0;  // cudaMemGetInfo's total - free at the end
    int64_t planner_peak_bytes = 0;
    std::string planner;   // the memory plan, described
    std::string gdn_impl;  // which Gated DeltaNet kernels ran
    int64_t comm_bytes_per_step = 0, shard_params = 0, replicated_params = 0;
    std::vector<float> sample;  // see BenchmarkConfig::sample_stride
};

// Runs warmup + steps + 1 steps. FailedPrecondition in a build without CUDA; the device's error
// where no GPU can be used.
absl::StatusOr<BenchmarkResult> run_benchmark(const BenchmarkConfig& config,
                                              const BenchmarkHooks& hooks = {});

// The benchmark's data. Documents of lognormal(7.0, 0.5) lengths clipped to [16,
// tokens_per_batch], packed greedily into batches of at most tokens_per_batch tokens (as the
// PyTorch peer's batches_1d, scripts/peer/bench_peer_lora.py; std::mt19937_64, so not the peer's
// exact lengths), uniform random ids, no token masked from the loss. A step's global batch is
// world_size * grad_accum micro-batches, rank r taking r*K .. r*K+K-1: every rank draws every
// batch (one random stream from `seed`) and packs only its own, so runs at different world
// sizes with the same world_size * K see the same documents per step.
struct SyntheticSteps {
    std::vector<PackedBatch> batches;               // this rank's: step s, micro-batch k at s*K+k
    std::vector<std::vector<int64_t>> doc_lengths;  // the documents of each of those batches
    std::vector<int64_t> global_labels;             // per step: trained targets of every rank
};
absl::StatusOr<SyntheticSteps> synthetic_steps(const Qwen35Config& model, int64_t steps,
                                               int64_t grad_accum, int world_size, int rank,
                                               int64_t tokens_per_batch, uint64_t seed,
                                               double prompt_fraction = 0);

// `model` with `layers` layers: the config's list cut, or continued past its end in the
// published pattern (three linear-attention layers, then one full).
Qwen35Config with_layers(Qwen35Config model, int64_t layers);

}  // namespace deltatune
