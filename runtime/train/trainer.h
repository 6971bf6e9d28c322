// The training loop of one rank on the CPU reference path: model from a Hugging Face folder, data
// through the data pipeline (tokenized, cached, packed 1D), LR schedule, gradient accumulation,
// clipping by global norm, AdamW, optional evaluation, periodic atomic checkpoints, resume from
// the newest valid checkpoint (falling back past corrupt ones), and a Hugging Face export at the
// end. It knows nothing of gRPC: the caller observes it through TrainerHooks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/optim/adamw.h"
#include "runtime/data/dataset.h"
#include "runtime/data/packing.h"
#include "runtime/distributed/communicator.h"
#include "runtime/model/lora.h"
#include "runtime/train/early_stopping.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/train_engine.h"

namespace deltatune {

struct TrainConfig {
    std::string model_dir;
    std::vector<std::string> train_files;
    std::vector<double> train_weights;  // per train file, times per epoch; empty: 1 each
    // LoRA (model/lora.h) instead of full fine-tuning: the adapter trains (initialised from
    // `seed`), the base stays frozen, checkpoints hold the adapter and the export is PEFT's.
    std::optional<LoraSpec> lora;
    bool lora_merged_export = false;  // export W + scale B A whole instead of the PEFT folder
    std::vector<std::string> eval_files;
    DatasetFormat format = DatasetFormat::kAuto;
    BadLinePolicy bad_lines = BadLinePolicy::kFail;
    std::string tokenizer;      // tokenizer.json or folder; empty = model_dir
    std::string chat_template;  // "qwen3", "qwen3_5"; empty = chosen by the tokenizer's size
    int64_t shuffle_window = 4096;
    OverlongPolicy overlong = OverlongPolicy::kSplit;
    int64_t tokens_per_batch = 8192;
    int64_t grad_accum = 1;
    // The run's length (training_length.h): max_steps optimizer steps, or with max_steps 0,
    // num_epochs passes over the packed data; warmup: lr.warmup_steps, or with warmup_ratio > 0
    // that fraction of the steps.
    int64_t max_steps = 1;
    double num_epochs = 0;
    double warmup_ratio = 0;
    LrSchedule lr;               // lr.max_steps and lr.warmup_steps are set from the above
    AdamWHyper adamw;            // adamw.lr is replaced by the schedule each step
    double max_grad_norm = 1.0;  // 0 = no clipping
    int64_t eval_every = 0;      // 0 = only at the end (when eval files exist)
    // On: stop when evaluations stop improving, keep the best checkpoint, export its weights.
    EarlyStoppingConfig early_stopping;
    int64_t checkpoint_every = 0;  // 0 = only at the end and when asked to stop
    int64_t keep_last_n = 2;
    std::string output_dir;  // checkpoints/, export/, cache/
    // A checkpoint folder to start from when output_dir has none of its own yet (a run continued
    // in a new folder); "" starts from the model.
    std::string resume_checkpoint;
    // Bounds on one document of the data (DatasetOptions).
    int64_t max_document_bytes = DatasetOptions::kDefaultMaxDocumentBytes;
    int64_t max_document_tokens = DatasetOptions::kDefaultMaxDocumentTokens;
    uint64_t seed = 0;
    // Data parallelism. `comm` (not owned; nullptr = one process) connects the ranks, which
    // shard parameters and optimizer state (FsdpCpuParams). A step's global batch is
    // `data_shards` packed bins per micro-step (0 = the world size), dealt round-robin over the
    // ranks, so it is the same documents whatever the world size divides it: runs at world sizes
    // 1, 2 and 3 with data_shards 6 train on identical batches, and a job can resume at another
    // world size without skipping or repeating a document.
    Communicator* comm = nullptr;
    int data_shards = 0;
    // GPU ranks (gpu.enabled): the model trains on the GPU with FSDP over NCCL (gpu says how the
    // ranks meet; `comm` is unused), else on the CPU reference path.
    GpuRankOptions gpu;
};

struct TrainerEvent {
    std::string type;  // DATA_LOADED, STEP_METRICS, CHECKPOINT_COMMITTED, EXPORT_COMPLETED, ...
    std::string level = "INFO";
    std::string message;
    std::map<std::string, double> metrics;
    std::map<std::string, std::string> details;
};

struct TrainProgress {
    int64_t step = 0;
    int64_t total_steps = 0;
    int64_t epoch = 0;
    int64_t tokens = 0;  // real tokens consumed so far
    double tokens_per_second = 0;
    double eta_seconds = 0;
    std::map<std::string, double> metrics;  // loss, lr, grad_norm, eval_loss
    std::string latest_checkpoint;
};

enum class StopRequest { kNone, kCheckpointAndExit, kExitNow };

struct TrainerHooks {
    std::function<void(const TrainerEvent&)> on_event = [](const TrainerEvent&) {};
    std::function<void(const TrainProgress&)> on_progress = [](const TrainProgress&) {};
    std::function<StopRequest()> poll = [] { return StopRequest::kNone; };
};

struct TrainResult {
    bool completed = false;  // false: stopped on request before max_steps
    int64_t step = 0;
    double last_loss = 0;
    double last_eval_loss = 0;
    bool early_stopped = false;  // ended by early stopping before the last step
    int64_t exported_step = 0;   // the step whose weights the export holds
    std::string export_dir;      // set when completed
    std::string latest_checkpoint;
};

// Runs (or resumes) training. Invalid configuration or data: InvalidArgument / NotFound.
absl::StatusOr<TrainResult> train(const TrainConfig& config, const TrainerHooks& hooks);

}  // namespace deltatune
