// Host <-> device transfers through a fixed set of pinned host buffers: the host fills (or
// drains) one buffer while the device copies another, so a stream of host pieces (a
// checkpoint's byte ranges, an export's tensors) moves at copy speed while host memory stays at
// buffers x buffer_bytes, whatever the model's size.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune {

class PinnedStaging {
  public:
    static absl::StatusOr<PinnedStaging> create(size_t buffer_bytes, int buffers = 2);
    PinnedStaging(PinnedStaging&& o) noexcept;
    PinnedStaging& operator=(PinnedStaging&&) = delete;
    PinnedStaging(const PinnedStaging&) = delete;
    ~PinnedStaging();

    size_t buffer_bytes() const { return bytes_; }
    // Host -> device: waits until a buffer is free, lets `fill` write `bytes` (at most
    // buffer_bytes()) into it, enqueues its copy to `dst` on `stream`, then `then` (work on the
    // same stream that reads dst, e.g. a cast; may be empty). Returns once the copy is enqueued:
    // the next fill overlaps it.
    absl::Status upload(size_t bytes, const std::function<absl::Status(void* host)>& fill,
                        void* dst, cudaStream_t stream,
                        const std::function<cudaError_t()>& then = nullptr);
    // Device -> host: copies `bytes` (at most buffer_bytes()) from `src` after the stream's work
    // so far, waits for it, and hands the host copy to `drain`.
    absl::Status download(size_t bytes, const void* src, cudaStream_t stream,
                          const std::function<absl::Status(const void* host)>& drain);
    // Waits for every enqueued upload.
    absl::Status finish();

  private:
    PinnedStaging() = default;
    size_t bytes_ = 0;
    std::vector<void*> host_;
    std::vector<cudaEvent_t> done_;  // per buffer: its last copy finished
    size_t next_ = 0;
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
