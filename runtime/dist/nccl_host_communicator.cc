#include "runtime/dist/nccl_host_communicator.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {

template <typename Op>
absl::Status NcclHostCommunicator::staged(const void* in, size_t in_bytes, void* out,
                                          size_t out_bytes, Op op) {
    const cudaStream_t s = dev_.compute_stream();
    DT_ASSIGN_OR_RETURN(DeviceMemory d, dev_.allocate(std::max<size_t>(in_bytes, out_bytes) + 16));
    if (in_bytes > 0) {
        DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d.get(), in, in_bytes, cudaMemcpyHostToDevice, s));
    }
    DT_RETURN_IF_ERROR(op(d.get(), s));
    // Poll first: a blocking copy behind a collective whose peer died would never return.
    DT_RETURN_IF_ERROR(nccl_.wait(s));
    if (out_bytes > 0) {
        DT_CUDA_RETURN_IF_ERROR(cudaMemcpy(out, d.get(), out_bytes, cudaMemcpyDeviceToHost));
    }
    return absl::OkStatus();
}

absl::Status NcclHostCommunicator::all_reduce_sum(float* data, size_t n) {
    if (n == 0) return absl::OkStatus();
    return staged(data, n * sizeof(float), data, n * sizeof(float), [&](void* d, cudaStream_t s) {
        return nccl_.all_reduce_sum_f32(static_cast<float*>(d), n, s);
    });
}

absl::Status NcclHostCommunicator::all_reduce_sum(double* data, size_t n) {
    if (n == 0) return absl::OkStatus();
    return staged(data, n * sizeof(double), data, n * sizeof(double), [&](void* d, cudaStream_t s) {
        return nccl_.all_reduce_sum_f64(static_cast<double*>(d), n, s);
    });
}

// The buffer holds the full array; this rank's shard goes to its slot first (NCCL's in-place
// all-gather layout).
absl::Status NcclHostCommunicator::all_gather(const float* shard, size_t shard_n, float* full) {
    const size_t w = static_cast<size_t>(world_size());
    const size_t offset = static_cast<size_t>(rank()) * shard_n;
    return staged(nullptr, 0, full, w * shard_n * sizeof(float), [&](void* d, cudaStream_t s) {
        float* buf = static_cast<float*>(d);
        if (const cudaError_t e = cudaMemcpyAsync(buf + offset, shard, shard_n * sizeof(float),
                                                  cudaMemcpyHostToDevice, s);
            e != cudaSuccess) {
            return cuda_status(e, "cudaMemcpyAsync", __FILE__, __LINE__);
        }
        return nccl_.all_gather_f32(buf + offset, buf, shard_n, s);
    });
}

// NCCL's in-place reduce-scatter writes this rank's result at its own offset of the buffer.
absl::Status NcclHostCommunicator::reduce_scatter_sum(const float* full, size_t shard_n,
                                                      float* shard) {
    const size_t w = static_cast<size_t>(world_size());
    const size_t offset = static_cast<size_t>(rank()) * shard_n;
    const cudaStream_t s = dev_.compute_stream();
    DT_ASSIGN_OR_RETURN(DeviceMemory d, dev_.allocate(w * shard_n * sizeof(float) + 16));
    float* buf = d.as<float>();
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(buf, full, w * shard_n * sizeof(float), cudaMemcpyHostToDevice, s));
    DT_RETURN_IF_ERROR(nccl_.reduce_scatter_sum_f32(buf, buf + offset, shard_n, s));
    DT_RETURN_IF_ERROR(nccl_.wait(s));
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(shard, buf + offset, shard_n * sizeof(float), cudaMemcpyDeviceToHost));
    return absl::OkStatus();
}

absl::Status NcclHostCommunicator::barrier() {
    double one = 1;
    return all_reduce_sum(&one, 1);
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
