// Communicator: the collectives data-parallel training needs, over fp32 buffers on the host. Two
// engines: LocalCommunicator (world size 1: every collective is a copy) and Gloo over TCP for CPU
// ranks (gloo_communicator.h). Every collective is blocking and returns DeadlineExceeded when a
// peer does not answer within the communicator's timeout, so no rank waits forever.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/status.h"

namespace deltatune {

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int world_size() const = 0;
    // In place: data[i] = sum over ranks of data[i].
    virtual absl::Status all_reduce_sum(float* data, size_t n) = 0;
    virtual absl::Status all_reduce_sum(double* data, size_t n) = 0;
    // full[r * shard_n + i] = rank r's shard[i]; `full` holds world_size * shard_n elements.
    virtual absl::Status all_gather(const float* shard, size_t shard_n, float* full) = 0;
    // shard[i] = sum over ranks of full[rank * shard_n + i] (full: world_size * shard_n).
    virtual absl::Status reduce_scatter_sum(const float* full, size_t shard_n, float* shard) = 0;
    virtual absl::Status barrier() = 0;
};

// World size 1.
class LocalCommunicator final : public Communicator {
  public:
    int rank() const override { return 0; }
    int world_size() const override { return 1; }
    absl::Status all_reduce_sum(float*, size_t) override { return absl::OkStatus(); }
    absl::Status all_reduce_sum(double*, size_t) override { return absl::OkStatus(); }
    absl::Status all_gather(const float* shard, size_t n, float* full) override;
    absl::Status reduce_scatter_sum(const float* full, size_t n, float* shard) override;
    absl::Status barrier() override { return absl::OkStatus(); }
};

}  // namespace deltatune
