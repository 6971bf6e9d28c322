// Pinned staging buffers for bounded host <-> device streams (see pinned_staging.h).
#include "runtime/device/pinned_staging.h"

#if DELTATUNE_HAVE_CUDA
#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {

absl::StatusOr<PinnedStaging> PinnedStaging::create(size_t buffer_bytes, int buffers) {
    if (buffer_bytes == 0 || buffers < 1) {
        return absl::InvalidArgumentError("PinnedStaging needs a buffer size and >= 1 buffer");
    }
    PinnedStaging s;
    s.bytes_ = buffer_bytes;
    for (int i = 0; i < buffers; ++i) {
        void* p = nullptr;
        DT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, buffer_bytes));
        s.host_.push_back(p);
        cudaEvent_t e = nullptr;
        DT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        s.done_.push_back(e);
    }
    return s;
}

PinnedStaging::PinnedStaging(PinnedStaging&& o) noexcept
    : bytes_(o.bytes_), host_(std::move(o.host_)), done_(std::move(o.done_)), next_(o.next_) {
    o.host_.clear();
    o.done_.clear();
}

PinnedStaging::~PinnedStaging() {
    for (cudaEvent_t e : done_) {
        cudaEventSynchronize(e);  // a copy may still read the buffer
        cudaEventDestroy(e);
    }
    for (void* p : host_) cudaFreeHost(p);
}

absl::Status PinnedStaging::upload(size_t bytes, const std::function<absl::Status(void*)>& fill,
                                   void* dst, cudaStream_t stream,
                                   const std::function<cudaError_t()>& then) {
    if (bytes > bytes_) {
        return absl::InvalidArgumentError(
            absl::StrCat("staging upload of ", bytes, " bytes, buffers hold ", bytes_));
    }
    const size_t b = next_;
    next_ = (next_ + 1) % host_.size();
    DT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_[b]));  // its previous copy has read it
    DT_RETURN_IF_ERROR(fill(host_[b]));
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, host_[b], bytes, cudaMemcpyHostToDevice, stream));
    DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_[b], stream));
    if (then) DT_CUDA_RETURN_IF_ERROR(then());
    return absl::OkStatus();
}

absl::Status PinnedStaging::download(size_t bytes, const void* src, cudaStream_t stream,
                                     const std::function<absl::Status(const void*)>& drain) {
    if (bytes > bytes_) {
        return absl::InvalidArgumentError(
            absl::StrCat("staging download of ", bytes, " bytes, buffers hold ", bytes_));
    }
    const size_t b = next_;
    next_ = (next_ + 1) % host_.size();
    DT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_[b]));
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_[b], src, bytes, cudaMemcpyDeviceToHost, stream));
    DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_[b], stream));
    DT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_[b]));
    return drain(host_[b]);
}

absl::Status PinnedStaging::finish() {
    for (cudaEvent_t e : done_) DT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e));
    return absl::OkStatus();
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
