// What the training loop (trainer.h) drives on one rank: the model, its sharded optimizer state
// and the rank's collectives. Two engines: the CPU reference path (Qwen35CpuModel with
// FsdpCpuParams over the given Communicator) and the GPU path (Qwen35GpuModel over
// FsdpGpuParams, NCCL between the GPU ranks). The loop itself, data, schedule, checkpoints and
// events, is the same for both.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/optim/adamw.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/distributed/communicator.h"
#include "runtime/distributed/kv_store.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/qwen35_cpu_model.h"
#include "runtime/train/train_state.h"

namespace deltatune {

class TrainEngine {
  public:
    virtual ~TrainEngine() = default;
    // "cpu" or "cuda-fsdp", for events and logs.
    virtual std::string name() const = 0;
    // The activation recompute policy in force ("layer" | "none"; "" on the CPU).
    virtual std::string recompute() const { return ""; }
    // Host-value collectives between the ranks (counts, loss sums, stop votes, checkpoints).
    virtual Communicator& comm() = 0;
    // Clears the accumulated gradients: before a step's first micro-batch.
    virtual absl::Status begin_step() = 0;
    // Forward and backward of one micro-batch; the gradient of loss_sum / `global_labels` (the
    // trained targets of the whole step over all ranks) accumulates. `last` marks this rank's
    // last micro-batch of the step. Every rank calls it equally often (a sharded engine's
    // collectives), also with a batch of no trained targets. Returns the batch's loss sum.
    virtual absl::StatusOr<double> forward_backward(const PackedBatch& batch, int64_t global_labels,
                                                    bool last) = 0;
    // The optimizer step over the accumulated gradients (clipped by the global norm when
    // max_grad_norm > 0); returns the norm before clipping.
    virtual absl::StatusOr<double> apply(const AdamWHyper& hyper, double max_grad_norm) = 0;
    // The loss of a batch with trained targets, parameters unchanged. Every rank evaluates the
    // same batches. May leave gradients behind (begin_step clears them).
    virtual absl::StatusOr<LossResult> evaluate(const PackedBatch& batch) = 0;
    // The sharded state for checkpoints (save_train_state / load_train_state).
    virtual ShardedStateIo state_io() = 0;
    // Collective: the full fp32 parameters into `params` (same names and shapes) on every rank.
    // Under a LoRA adapter: the adapter's tensors into the set the engine was given.
    virtual absl::Status download(ParamSet& params) = 0;
    // Collective export source (full fine-tuning): parameter i's current values in the stored
    // dtype of `layout`'s parameter i, a bounded piece at a time. Every rank calls it for every
    // parameter in order; only the writing rank's pieces need go anywhere. Lives as long as the
    // engine.
    virtual ParamBytes param_bytes(const ParamSet& layout) = 0;

    // What the step metrics report of the device (zeros on the CPU): the dense bf16 peak FLOP/s
    // that MFU divides by (0: unknown GPU, no MFU), the most device memory the rank has held,
    // and the memory planner's peak for this rank.
    struct DeviceFigures {
        double peak_flops = 0;
        int64_t peak_bytes = 0, planned_bytes = 0;
    };
    virtual DeviceFigures device_figures() const { return {}; }
};

// `model.params` must outlive the engine: the CPU engine computes over it. `comm` (not owned)
// connects the CPU ranks. Full fine-tuning shards the parameters over the ranks (FsdpCpuParams):
// a rank reads its shard from the model's files when they were not read yet, and model.params
// holds values only while a unit is gathered (download() gathers them all). With `adapters`
// (model/lora.h, outliving the engine) only they train, in place, the base frozen and read whole;
// download() then leaves model.params as they are.
absl::StatusOr<std::unique_ptr<TrainEngine>> make_cpu_train_engine(HfModel& model,
                                                                   Communicator& comm,
                                                                   ParamSet* adapters = nullptr,
                                                                   float lora_scale = 0);

// How a GPU rank trains and meets its peers.
struct GpuRankOptions {
    bool enabled = false;  // train on the GPU (else the CPU reference path)
    int device = 0;        // CUDA device of this rank
    int rank = 0, world_size = 1;
    std::shared_ptr<KeyValueStore> store;  // NCCL id rendezvous (else the folder store_dir)
    std::string store_dir;
    std::string prefix = "nccl";
    // A collective that does not finish within `timeout` aborts the communicator (an error on
    // this rank); a rank that makes no progress for twice that ends its process (watchdog).
    std::chrono::milliseconds timeout{300000};
    bool watchdog = true;
    // "layer", "none", or "auto": none where the memory planner says it fits this GPU at this
    // world size and tokens_per_batch (runtime/train/memory_plan.h choose_recompute).
    std::string recompute = "auto";
    int64_t tokens_per_batch = 8192;
    // The linear projections' GEMMs in FP8 (Qwen35GpuModel::set_fp8_projections): opt-in.
    bool fp8_projections = false;
};

// Loads the model into this rank's shards on the GPU: straight from the checkpoint's files when
// its weights were not materialized (open_hf_model), so the host never holds the model. With
// `adapters` (a LoRA set outliving the engine) the base is frozen in bf16 and only the adapter
// trains; download() then refreshes `adapters`. FailedPrecondition in a build without CUDA.
absl::StatusOr<std::unique_ptr<TrainEngine>> make_gpu_train_engine(const HfModel& model,
                                                                   const GpuRankOptions& options,
                                                                   ParamSet* adapters = nullptr,
                                                                   float lora_scale = 0);

}  // namespace deltatune
