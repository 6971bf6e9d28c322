// DeviceContext: everything one worker needs to run ops on one device, passed explicitly to every
// runtime op (no globals). On CUDA it owns a compute stream and a communication stream, the
// stream-ordered caching allocator, the cuBLASLt GEMM runner with its workspace and a cuBLAS
// handle (the fused cross-entropy's chunk GEMMs); later issues add the NCCL communicator.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/device/cuda_allocator.h"
#include "runtime/device/gemm.h"
#include "runtime/tensor/tensor.h"

// Same typedef as cuda_runtime.h, so this header stays free of CUDA includes.
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct cublasContext;

namespace deltatune {

class CudnnAttention;  // kernels/attention/attention_cudnn.h

// The attention core that serves head_dim 256 on sm_90:
//   kWgmma ("wgmma", the default): kernels/attention/attention_wgmma.cu forward (wgmma + TMA,
//     the gate fused) and kernels/attention/attention_wgmma_backward.cu backward (deterministic
//     where the batch's dS tiles fit its 4 GiB budget, else dq summed with atomics); each faster
//     than cuDNN's SDPA with the gate's passes on packed batches;
//   kCudnn (DELTATUNE_ATTENTION=cudnn, where built): cuDNN's both ways;
//   kFlash (DELTATUNE_ATTENTION=flash): kernels/attention/attention_flash.cu both ways,
//     handwritten on mma.sync and bitwise deterministic.
// Which runs when, per family: kernels/README.md.
enum class AttentionCore { kWgmma, kCudnn, kFlash };
const char* attention_core_name(AttentionCore core);
// The core DELTATUNE_ATTENTION names (kWgmma when it is unset or empty); InvalidArgument for any
// other value, and for "cudnn" in builds without cuDNN's attention. Read where a process decides:
// DeviceContext::create (which keeps it; a CUDA context refuses to start on a bad value), the
// daemon's memory planning and `deltatune kernels` (probe_machine).
absl::StatusOr<AttentionCore> attention_core_from_env();

// A GPU as the kernel choices (runtime/model/kernel_choice.h) and the memory planner see it.
struct GpuArch {
    int sm_version = 0;  // compute capability, e.g. 80, 90, 100; 0: no usable GPU
    // The kernels' code the driver loads for it (kernels/common/code_arch.h): 90 (sm_90a, the
    // Hopper kernels), 80 (the portable code), 0 (none: a GPU before sm_80, or a build without it).
    int code_arch = 0;
    // The machine code that runs: 90 or 80 as built, or the newer GPU's own where its SASS was
    // made from the portable code (ahead of time for sm_100 and sm_120, else by the driver).
    int code_binary = 0;
    int64_t smem_per_block = 0;  // opt-in shared memory per block, bytes
};
// An H100 or H200 running the sm_90a code: what a plan made without the GPU at hand assumes.
GpuArch hopper_gpu_arch();
// CUDA device `index` and the code loaded for it (FailedPrecondition without CUDA).
absl::StatusOr<GpuArch> probe_gpu_arch(int index);

// Whether GEMM algorithms are the heuristic's first per shape (the default: the same algorithm,
// and so the same rounding, in every process) or timed per shape among cuBLASLt's top candidates
// (DELTATUNE_GEMM=timed: up to 10% faster on some weight-gradient shapes alone, no faster over a
// whole 27B training step). check_gemm_choice: InvalidArgument for other values.
bool gemm_times_candidates();
absl::Status check_gemm_choice();

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
    // CUDA only (null on CPU).
    CudaAllocator* allocator() const { return allocator_.get(); }
    Gemm* gemm() const { return gemm_.get(); }
    cublasContext* blas() const { return blas_; }
    int sm_version() const { return gpu_.sm_version; }  // e.g. 90; 0 on CPU
    const GpuArch& gpu() const { return gpu_; }         // all zero on CPU
    // Stream-ordered allocation on the compute stream (FailedPrecondition on CPU).
    absl::StatusOr<DeviceMemory> allocate(size_t bytes) const;

    // The attention core, resolved once when the context was made (kWgmma on CPU contexts).
    AttentionCore attention_core() const { return attention_core_; }
    // cuDNN's attention where built and the core is kCudnn; the handle is created on the first
    // call. Null when the handwritten kernels serve.
    absl::StatusOr<CudnnAttention*> cudnn_attention() const;

    // Waits for all work on both streams (host sync: for tests and step boundaries only).
    absl::Status synchronize() const;

  private:
    explicit DeviceContext(Device d);  // out of line: CudnnAttention is incomplete here
    Device device_;
    cudaStream_t compute_ = nullptr;
    cudaStream_t comm_ = nullptr;
    GpuArch gpu_;
    AttentionCore attention_core_ = AttentionCore::kWgmma;
    // Declaration order is destruction order reversed: the workspace goes back to the allocator
    // before the allocator's pool is destroyed.
    std::unique_ptr<CudaAllocator> allocator_;
    DeviceMemory gemm_workspace_;
    std::unique_ptr<Gemm> gemm_;
    cublasContext* blas_ = nullptr;
    mutable std::unique_ptr<CudnnAttention> cudnn_attention_;
};

}  // namespace deltatune
