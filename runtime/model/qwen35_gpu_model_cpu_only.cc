// Qwen35GpuModel in a build without CUDA: every entry point says so (the daemon and tests
// check for it before use).
#include "runtime/model/qwen35_gpu_model.h"

#if !DELTATUNE_HAVE_CUDA

namespace deltatune {

struct Qwen35GpuModel::Impl {};
Qwen35GpuModel::Qwen35GpuModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Qwen35GpuModel::~Qwen35GpuModel() = default;
absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> Qwen35GpuModel::create(DeviceContext&,
                                                                       const Qwen35Config&,
                                                                       ParamSet&, Recompute) {
    return absl::FailedPreconditionError("built without CUDA (DELTATUNE_CUDA=OFF or no nvcc)");
}
absl::StatusOr<LossResult> Qwen35GpuModel::forward(const PackedBatch&, double) {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status Qwen35GpuModel::backward() {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status Qwen35GpuModel::zero_grads() {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status Qwen35GpuModel::download_grads(ParamSet&) const {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status Qwen35GpuModel::download_params(ParamSet&) const {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> Qwen35GpuModel::create_random(DeviceContext&,
                                                                              const Qwen35Config&,
                                                                              Recompute, uint64_t) {
    return absl::FailedPreconditionError("built without CUDA (DELTATUNE_CUDA=OFF or no nvcc)");
}
int64_t Qwen35GpuModel::peak_device_bytes() const {
    return 0;
}

void Qwen35GpuModel::set_label_only_head(bool) {}
void Qwen35GpuModel::set_fp8_projections(bool) {}

}  // namespace deltatune
#endif  // !DELTATUNE_HAVE_CUDA
