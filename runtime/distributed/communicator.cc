#include "runtime/distributed/communicator.h"

#include <algorithm>

namespace deltatune {

absl::Status LocalCommunicator::all_gather(const float* shard, size_t n, float* full) {
    std::copy(shard, shard + n, full);
    return absl::OkStatus();
}

absl::Status LocalCommunicator::reduce_scatter_sum(const float* full, size_t n, float* shard) {
    std::copy(full, full + n, shard);
    return absl::OkStatus();
}

}  // namespace deltatune
