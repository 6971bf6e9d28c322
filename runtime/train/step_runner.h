// One training step from the command line's point of view (`deltatune step`): load a Hugging Face
// model directory and a BATCH.json, run forward and backward on the packed batch, optionally
// write the gradients and the parameters after one AdamW step. Shared by the CLI and the tests.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/optim/adamw.h"

namespace deltatune {

struct StepOptions {
    std::string model_dir;
    std::string batch_path;
    std::string device = "cpu";      // "cpu" or "cuda"
    std::string recompute = "none";  // cuda only: "none" or "layer" (model/qwen35_gpu_model.h)
    std::string grads_out;           // fp32 safetensors, names "grad.<HF name>"; empty = skip
    std::string update_out;  // fp32 safetensors of params after one AdamW step; empty = skip
    AdamWHyper adamw;
    // A PEFT LoRA folder (model/lora.h): the base is frozen; the report's gradient norm, the
    // gradients and the update are the adapter's, under PEFT's tensor names.
    std::string adapter_dir;
};

struct StepReport {
    double loss = 0;
    int64_t label_tokens = 0;
    int64_t tokens = 0;
    int64_t documents = 0;
    double grad_norm = 0;  // global L2 norm of all parameter gradients
    double seconds = 0;    // forward + backward wall time
};

absl::StatusOr<StepReport> run_step(const StepOptions& options);

}  // namespace deltatune
