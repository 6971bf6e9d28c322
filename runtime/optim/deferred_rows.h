// AdamW's deferred row updates (AdamWTensorArgs::defer_unmarked): at world size 1 with untied
// embeddings only the rows of the step's ids have a gradient, and a zero-gradient step would
// still move the others through the moments and weight decay. AdamW leaves those rows as they
// are; each owes the steps recorded since its last update, applied with the same bits
// (adamw_catch_up_rows) before a forward reads it or anything reads the masters. At the 27B
// shape that spares AdamW about 97% of the embedding's 1.27 B parameters per step.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/optim/adamw.h"
#include "runtime/device/device_context.h"
#include "runtime/model/gpu_param_store.h"

namespace deltatune {

class DeferredRows final : public DeferredRowUpdates {
  public:
    // `tensor`: the deferring tensor (rows valid, defer_unmarked set); `dev` outlives this.
    static absl::StatusOr<std::unique_ptr<DeferredRows>> create(DeviceContext& dev,
                                                                const AdamWTensorArgs& tensor);
    // Around the update: record() stores the step's scalars before it; count() then counts the
    // step for the rows it updated, catching every row up when the record is full.
    absl::Status record(const AdamWHyper& hyper, int64_t step);
    absl::Status count();

    absl::Status catch_up(const int32_t* sorted_ids, int64_t n) override;
    absl::Status catch_up_all() override;
    absl::Status forget() override;

  private:
    explicit DeferredRows(DeviceContext& dev) : dev_(dev) {}
    static constexpr int32_t kMaxSteps = 1024;  // steps recorded before a full catch-up
    DeviceContext& dev_;
    AdamWTensorArgs tensor_{};
    DeviceMemory steps_;      // AdamWStepScalars of the steps since the last catch-up
    DeviceMemory row_steps_;  // per row (int32): how many of them it has had
    int32_t steps_len_ = 0;
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
