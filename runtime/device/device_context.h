// DeviceContext: everything one worker needs to run ops on one device, passed explicitly to every
// runtime op (no globals). On CUDA it owns a compute stream and a communication stream; later
// issues add the cuBLASLt handle, workspace and NCCL communicator here.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "runtime/tensor/tensor.h"

// Same typedef as cuda_runtime.h, so this header stays free of CUDA includes.
struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace deltatune {

// Number of CUDA devices this process can use: 0 in a CPU-only build or without a driver/GPU.
// `why_not` (optional) receives a one-line reason when the answer is 0.
int cuda_device_count(std::string* why_not = nullptr);

class DeviceContext {
  public:
    // CPU contexts always succeed; CUDA contexts fail with FailedPrecondition (no device, no
    // CUDA build) or the CUDA error translated to a Status.
    static absl::StatusOr<std::unique_ptr<DeviceContext>> create(Device device);
    ~DeviceContext();
    DeviceContext(const DeviceContext&) = delete;
    DeviceContext& operator=(const DeviceContext&) = delete;

    Device device() const { return device_; }
    cudaStream_t compute_stream() const { return compute_; }  // null on CPU
    cudaStream_t comm_stream() const { return comm_; }        // null on CPU
    // Waits for all work on both streams (host sync: for tests and step boundaries only).
    absl::Status synchronize() const;

  private:
    explicit DeviceContext(Device d) : device_(d) {}
    Device device_;
    cudaStream_t compute_ = nullptr;
    cudaStream_t comm_ = nullptr;
};

}  // namespace deltatune
