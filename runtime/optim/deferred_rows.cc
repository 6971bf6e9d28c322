#include "runtime/optim/deferred_rows.h"

#if DELTATUNE_HAVE_CUDA
#include "kernels/optim/grad_rows.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {

absl::StatusOr<std::unique_ptr<DeferredRows>> DeferredRows::create(DeviceContext& dev,
                                                                   const AdamWTensorArgs& tensor) {
    if (!tensor.defer_unmarked || !row_mask_valid(tensor.rows)) {
        return absl::InvalidArgumentError("deferred rows: the tensor has no valid row mask");
    }
    std::unique_ptr<DeferredRows> d(new DeferredRows(dev));
    d->tensor_ = tensor;
    DT_ASSIGN_OR_RETURN(d->steps_, dev.allocate(sizeof(AdamWStepScalars) * kMaxSteps));
    DT_ASSIGN_OR_RETURN(d->row_steps_,
                        dev.allocate(sizeof(int32_t) * static_cast<size_t>(tensor.rows.rows)));
    DT_RETURN_IF_ERROR(d->forget());
    return d;
}

absl::Status DeferredRows::record(const AdamWHyper& hyper, int64_t step) {
    DT_CUDA_RETURN_IF_ERROR(adamw_record_scalars(steps_.as<AdamWStepScalars>(), steps_len_, hyper,
                                                 step, dev_.compute_stream()));
    return absl::OkStatus();
}

absl::Status DeferredRows::count() {
    ++steps_len_;  // the marked rows AdamW just updated have had every recorded step
    DT_CUDA_RETURN_IF_ERROR(set_marked_rows(row_steps_.as<int32_t>(), tensor_.rows.touched,
                                            tensor_.rows.rows, steps_len_, dev_.compute_stream()));
    if (steps_len_ == kMaxSteps) return catch_up_all();
    return absl::OkStatus();
}

absl::Status DeferredRows::catch_up(const int32_t* sorted_ids, int64_t n) {
    if (steps_len_ == 0) return absl::OkStatus();
    DT_CUDA_RETURN_IF_ERROR(adamw_catch_up_rows(tensor_, sorted_ids, n, row_steps_.as<int32_t>(),
                                                steps_.as<AdamWStepScalars>(), steps_len_,
                                                dev_.compute_stream()));
    return absl::OkStatus();
}

absl::Status DeferredRows::catch_up_all() {
    if (steps_len_ == 0) return absl::OkStatus();
    DT_RETURN_IF_ERROR(catch_up(nullptr, 0));  // no ids: every row
    return forget();
}

absl::Status DeferredRows::forget() {
    steps_len_ = 0;
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(row_steps_.get(), 0, row_steps_.bytes(), dev_.compute_stream()));
    return absl::OkStatus();
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
