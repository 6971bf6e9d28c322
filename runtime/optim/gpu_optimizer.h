// The GPU update, the one home of its math: the global gradient norm (squared norms summed over
// the ranks' shards, replicated gradients summed over ranks and counted once), clipping by it
// (torch.nn.utils.clip_grad_norm_ when max_grad_norm > 0) and AdamW with fp32 masters and
// moments, which also writes the bf16 copies. The store (runtime/model/gpu_param_store.h) hands
// over its tensors once; every step is then a few launches and collectives with one host wait
// (the norm read back). Serves the flat model, FSDP shards at any world size and LoRA adapters.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/optim/adamw.h"
#include "kernels/optim/grad_norm.h"
#include "runtime/device/device_context.h"
#include "runtime/distributed/nccl_communicator.h"
#include "runtime/model/gpu_param_store.h"
#include "runtime/optim/deferred_rows.h"

namespace deltatune {

class GpuOptimizer final {
  public:
    // `dev`, `store` and `comm` (null: one device, nothing to sum over ranks) must outlive it.
    static absl::StatusOr<std::unique_ptr<GpuOptimizer>> create(DeviceContext& dev,
                                                                GpuParamStore& store,
                                                                NcclCommunicator* comm);
    ~GpuOptimizer();
    GpuOptimizer(const GpuOptimizer&) = delete;
    GpuOptimizer& operator=(const GpuOptimizer&) = delete;

    // One step: the norm, clipping when max_grad_norm > 0, AdamW (1-based `step`). Returns the
    // global gradient norm before clipping.
    absl::StatusOr<double> step(const AdamWHyper& hyper, int64_t step, double max_grad_norm);
    // The global gradient norm alone, nothing updated (one device only).
    absl::StatusOr<double> grad_norm();

  private:
    // The step's device scalars (fp32), in one allocation.
    struct Scalars {
        float sharded_norm;     // of this rank's sharded gradients
        float replicated_norm;  // of the replicated gradients
        float square_sum;       // this rank's share of the squared global norm, then the sum
        float norm;             // the global norm
        float clip_coef;        // min(1, max_grad_norm / (norm + 1e-6))
    };
    // The tensors of one norm launch, planned.
    struct NormPlan {
        DeviceMemory tensors;  // GradNormTensor[count]
        int count = 0;
        int64_t chunks = 0;
    };
    GpuOptimizer(DeviceContext& dev, GpuParamStore& store, NcclCommunicator* comm)
        : dev_(dev), store_(store), comm_(comm) {}
    absl::Status plan(const std::vector<GpuOptimizerGroup>& groups);
    absl::StatusOr<NormPlan> plan_norm(const std::vector<AdamWTensorArgs>& tensors);
    bool multi_rank() const { return comm_ && comm_->world_size() > 1; }
    absl::Status sum_replicated_grads();
    absl::Status norm(float max_grad_norm);
    absl::StatusOr<double> read_norm();

    DeviceContext& dev_;
    GpuParamStore& store_;
    NcclCommunicator* comm_;
    std::vector<AdamWTensorArgs> replicated_;  // host copies: their gradients are all-reduced
    bool any_sharded_ = false;
    DeviceMemory adamw_tensors_;  // AdamWTensorArgs[adamw_count_], planned
    int adamw_count_ = 0;
    int64_t adamw_chunks_ = 0;
    NormPlan sharded_norm_, replicated_norm_, all_norm_;
    DeviceMemory norm_work_, scalars_;
    size_t norm_work_bytes_ = 0;
    std::unique_ptr<DeferredRows> deferred_;  // a tensor with defer_unmarked, if any
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
