#include "runtime/distributed/nccl_host_communicator.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {

template <typename Op>
absl::Status NcclHostCommunicator::staged(size_t bytes, const void* in, size_t in_bytes,
                                          size_t in_at, void* out, size_t out_bytes, size_t out_at,
                                          Op op) {
    const cudaStream_t s = dev_.compute_stream();
    DT_ASSIGN_OR_RETURN(DeviceMemory d, dev_.allocate(bytes + 16));
    char* buf = d.as<char>();
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf + in_at, in, in_bytes, cudaMemcpyHostToDevice, s));
    DT_RETURN_IF_ERROR(op(buf, s));
    // Poll first: a blocking copy behind a collective whose peer died would never return.
    DT_RETURN_IF_ERROR(nccl_.wait(s));
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpy(out, buf + out_at, out_bytes, cudaMemcpyDeviceToHost));
    return absl::OkStatus();
}

absl::Status NcclHostCommunicator::all_reduce_sum(float* data, size_t n) {
    if (n == 0) return absl::OkStatus();
    const size_t bytes = n * sizeof(float);
    return staged(bytes, data, bytes, 0, data, bytes, 0, [&](char* d, cudaStream_t s) {
        return nccl_.all_reduce_sum_f32(reinterpret_cast<float*>(d), n, s);
    });
}

absl::Status NcclHostCommunicator::all_reduce_sum(double* data, size_t n) {
    if (n == 0) return absl::OkStatus();
    const size_t bytes = n * sizeof(double);
    return staged(bytes, data, bytes, 0, data, bytes, 0, [&](char* d, cudaStream_t s) {
        return nccl_.all_reduce_sum_f64(reinterpret_cast<double*>(d), n, s);
    });
}

// NCCL's in-place layouts: the buffer holds the full array, this rank's shard at its own slot
// (the all-gather's input, the reduce-scatter's output).
absl::Status NcclHostCommunicator::all_gather(const float* shard, size_t shard_n, float* full) {
    const size_t shard_bytes = shard_n * sizeof(float);
    const size_t at = static_cast<size_t>(rank()) * shard_bytes;
    const size_t bytes = static_cast<size_t>(world_size()) * shard_bytes;
    return staged(bytes, shard, shard_bytes, at, full, bytes, 0, [&](char* d, cudaStream_t s) {
        return nccl_.all_gather_f32(reinterpret_cast<float*>(d + at), reinterpret_cast<float*>(d),
                                    shard_n, s);
    });
}

absl::Status NcclHostCommunicator::reduce_scatter_sum(const float* full, size_t shard_n,
                                                      float* shard) {
    const size_t shard_bytes = shard_n * sizeof(float);
    const size_t at = static_cast<size_t>(rank()) * shard_bytes;
    const size_t bytes = static_cast<size_t>(world_size()) * shard_bytes;
    return staged(bytes, full, bytes, 0, shard, shard_bytes, at, [&](char* d, cudaStream_t s) {
        return nccl_.reduce_scatter_sum_f32(reinterpret_cast<const float*>(d),
                                            reinterpret_cast<float*>(d + at), shard_n, s);
    });
}

absl::Status NcclHostCommunicator::barrier() {
    double one = 1;
    return all_reduce_sum(&one, 1);
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
