// The GPU engine (Qwen35GpuModel over FsdpGpuParams; world size 1 is one GPU), declared for the
// tools that measure it: `deltatune bench` times this object, the one daemon jobs train with,
// and reads its device, shards and model for its figures. CUDA builds only.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <memory>
#include <string>

#include "runtime/device/device_context.h"
#include "runtime/distributed/fsdp_gpu.h"
#include "runtime/distributed/nccl_host_communicator.h"
#include "runtime/distributed/progress_watchdog.h"
#include "runtime/model/gpu_lora.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/optim/gpu_optimizer.h"
#include "runtime/train/memory_plan.h"
#include "runtime/train/train_engine.h"

namespace deltatune {

class GpuTrainEngine final : public TrainEngine {
  public:
    // Loads `model.params` into this rank's shards. With `adapters` (a LoRA set, model/lora.h,
    // outliving the engine) the base is frozen in bf16 and only the adapter trains; download()
    // then refreshes `adapters` and leaves the base as it is.
    static absl::StatusOr<std::unique_ptr<GpuTrainEngine>> create(const HfModel& model,
                                                                  const GpuRankOptions& options,
                                                                  ParamSet* adapters = nullptr,
                                                                  float lora_scale = 0);
    // Parameters initialised on the device as transformers initialises them (no host copy);
    // with `adapters` as above.
    static absl::StatusOr<std::unique_ptr<GpuTrainEngine>> create_random(
        const Qwen35Config& config, const GpuRankOptions& options, uint64_t seed,
        ParamSet* adapters = nullptr, float lora_scale = 0);
    ~GpuTrainEngine() override;

    std::string name() const override { return "cuda-fsdp"; }
    std::string recompute() const override;
    Communicator& comm() override { return *host_; }
    absl::Status begin_step() override;
    absl::StatusOr<double> forward_backward(const PackedBatch& batch, int64_t global_labels,
                                            bool last) override;
    absl::StatusOr<double> apply(const AdamWHyper& hyper, double max_grad_norm) override;
    absl::StatusOr<LossResult> evaluate(const PackedBatch& batch) override;
    ShardedStateIo state_io() override;
    absl::Status download(ParamSet& params) override;
    ParamBytes param_bytes(const ParamSet& layout) override;
    DeviceFigures device_figures() const override;

    // For measurements.
    DeviceContext& device() { return *ctx_; }
    FsdpGpuParams& fsdp() { return *fsdp_; }
    Qwen35GpuModel& model() { return *net_; }
    NcclCommunicator& nccl() { return *nccl_; }
    GpuLoraAdapters* lora() { return lora_.get(); }  // null: full fine-tuning
    Recompute recompute_policy() const { return recompute_policy_; }
    // What the memory planner predicts for this rank under the resolved recompute policy.
    const MemoryPlan& memory_plan() const { return plan_; }

  private:
    GpuTrainEngine();
    static absl::StatusOr<std::unique_ptr<GpuTrainEngine>> prepare(const Qwen35Config& config,
                                                                   const GpuRankOptions& options,
                                                                   int64_t adapter_params);
    absl::Status attach_model(const Qwen35Config& config, ParamSet* adapters, float lora_scale);
    ShardedStateIo lora_state_io();
    void beat();

    // Declared first, destroyed last: it also guards the teardown of everything below.
    std::unique_ptr<ProgressWatchdog> watchdog_;
    std::unique_ptr<DeviceContext> ctx_;
    std::unique_ptr<NcclCommunicator> nccl_;
    std::unique_ptr<NcclHostCommunicator> host_;
    std::unique_ptr<FsdpGpuParams> fsdp_;
    std::unique_ptr<GpuLoraAdapters> lora_;  // declared before the model that reads it
    ParamSet* adapters_ = nullptr;           // the host set download() refreshes
    std::unique_ptr<Qwen35GpuModel> net_;
    std::unique_ptr<GpuOptimizer> optimizer_;  // over lora_ when set, else fsdp_
    int64_t adam_step_ = 0;
    int64_t tokens_per_batch_ = 8192;
    bool fp8_projections_ = false;
    int64_t kept_layers_ = 0;  // with per-layer recompute: the last layers that keep activations
    MemoryPlan plan_;          // the memory planner's, under the resolved policy
    Recompute recompute_policy_ = Recompute::kLayer;
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
