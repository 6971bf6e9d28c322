// The host-value collectives (Communicator: loss sums, label counts, stop votes, checkpoint
// agreement) for GPU ranks, over their NCCL communicator: values are staged through a small
// device buffer on the compute stream, so they are ordered after the step's work and share the
// communicator's timeout and abort (a dead peer ends in an error, never a hang). Doubles travel
// as fp64: token counts and loss sums stay exact across ranks.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include "runtime/device/device_context.h"
#include "runtime/distributed/communicator.h"
#include "runtime/distributed/nccl_communicator.h"

namespace deltatune {

class NcclHostCommunicator final : public Communicator {
  public:
    // `dev` and `nccl` must outlive this object.
    NcclHostCommunicator(DeviceContext& dev, NcclCommunicator& nccl) : dev_(dev), nccl_(nccl) {}
    int rank() const override { return nccl_.rank(); }
    int world_size() const override { return nccl_.world_size(); }
    absl::Status all_reduce_sum(float* data, size_t n) override;
    absl::Status all_reduce_sum(double* data, size_t n) override;
    absl::Status all_gather(const float* shard, size_t shard_n, float* full) override;
    absl::Status reduce_scatter_sum(const float* full, size_t shard_n, float* shard) override;
    absl::Status barrier() override;

  private:
    // Copies host `in` (in_bytes) to byte `in_at` of a device buffer of `bytes`, runs `op` on
    // (buffer, stream), waits polling NCCL, and copies `out_bytes` from byte `out_at` to `out`.
    template <typename Op>
    absl::Status staged(size_t bytes, const void* in, size_t in_bytes, size_t in_at, void* out,
                        size_t out_bytes, size_t out_at, Op op);

    DeviceContext& dev_;
    NcclCommunicator& nccl_;
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
