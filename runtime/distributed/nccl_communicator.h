// The NCCL engine for GPU ranks: collectives over device buffers on a CUDA stream (enqueue only;
// overlap comes from running them on the communication stream, ordered with events). The
// communicator is non-blocking (NCCL's `blocking = 0`): initialisation and waits poll
// ncclCommGetAsyncError and abort the communicator after `timeout`, so a rank whose peer died or
// hangs returns DeadlineExceeded instead of waiting forever. Ranks exchange the NCCL unique id
// through the rendezvous folder (rank 0 writes it atomically, the others wait for it).
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/distributed/kv_store.h"

namespace deltatune {

struct NcclOptions {
    int rank = 0;
    int world_size = 1;
    int device = 0;                        // CUDA device of this rank
    std::shared_ptr<KeyValueStore> store;  // the rendezvous store; else a folder:
    std::string store_dir;                 // rendezvous folder shared by the ranks
    std::string prefix = "nccl";           // file name of this attempt's unique id
    std::chrono::milliseconds timeout{120000};
};

class NcclCommunicator {
  public:
    static absl::StatusOr<std::unique_ptr<NcclCommunicator>> create(const NcclOptions& options);
    ~NcclCommunicator();  // destroys (or, after a failure, aborts) the communicator
    int rank() const { return rank_; }
    int world_size() const { return world_; }
    // True once the communicator was aborted (timeout or error): every later call fails at once
    // and nothing waits on its streams any more.
    bool aborted() const { return aborted_; }

    // Enqueue on `stream`. Element counts are per rank's shard where it says so.
    absl::Status all_gather_bf16(const void* shard, void* full, size_t shard_count,
                                 cudaStream_t stream);
    absl::Status all_gather_f32(const float* shard, float* full, size_t shard_count,
                                cudaStream_t stream);
    absl::Status reduce_scatter_sum_f32(const float* full, float* shard, size_t shard_count,
                                        cudaStream_t stream);
    absl::Status all_reduce_sum_f32(float* data, size_t count, cudaStream_t stream);
    absl::Status all_reduce_sum_f64(double* data, size_t count, cudaStream_t stream);
    // Waits for `stream`, polling NCCL's async error; aborts the communicator after the timeout.
    absl::Status wait(cudaStream_t stream);

  private:
    NcclCommunicator() = default;
    absl::Status check(int result, const char* what);
    absl::Status usable() const;
    absl::Status poll_until_ready(const char* what);
    absl::Status all_reduce_sum(void* data, size_t count, int nccl_dtype, cudaStream_t stream);

    void* comm_ = nullptr;  // ncclComm_t
    int rank_ = 0, world_ = 1;
    std::chrono::milliseconds timeout_{120000};
    bool aborted_ = false;
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
