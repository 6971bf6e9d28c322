// DeviceContext creation and teardown.
#include "runtime/device/device_context.h"

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#if DELTATUNE_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/common/code_arch.h"
#endif
#if DELTATUNE_HAVE_CUDNN_ATTENTION
#include "kernels/attention/attention_cudnn.h"
#else
namespace deltatune {
class CudnnAttention {};  // never created in a build without it; completes the owning pointer
}  // namespace deltatune
#endif

namespace deltatune {

int cuda_device_count(std::string* why_not) {
#if DELTATUNE_HAVE_CUDA
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        if (why_not) *why_not = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(err));
        cudaGetLastError();  // clear the non-sticky error
        return 0;
    }
    if (n == 0 && why_not) *why_not = "no CUDA device present";
    return n;
#else
    if (why_not) *why_not = "built without CUDA (DELTATUNE_CUDA=OFF or no nvcc)";
    return 0;
#endif
}

GpuArch hopper_gpu_arch() {
    return {90, 90, 90, 227 * 1024};
}

absl::StatusOr<GpuArch> probe_gpu_arch(int index) {
#if DELTATUNE_HAVE_CUDA
    GpuArch g;
    int major = 0, minor = 0, smem = 0, current = 0;
    DT_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
    DT_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
    DT_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, index));
    g.sm_version = major * 10 + minor;
    g.smem_per_block = smem;
    // The loaded code is the current device's: ask with `index` current, then put it back.
    DT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
    DT_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
    const LoadedCode code = loaded_code();
    DT_CUDA_RETURN_IF_ERROR(cudaSetDevice(current));
    g.code_arch = code.arch;
    g.code_binary = code.binary;
    return g;
#else
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", index, ": built without CUDA (DELTATUNE_CUDA=OFF or no nvcc)"));
#endif
}

namespace {

// OK when the variable is unset or one of `choices`; else an error naming it and them.
absl::Status check_env_choice(const char* name, std::initializer_list<std::string_view> choices) {
    const char* env = std::getenv(name);
    if (env == nullptr) return absl::OkStatus();
    std::string expected;
    size_t i = 0;
    for (std::string_view c : choices) {
        if (c == env) return absl::OkStatus();
        const char* sep = i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ";
        absl::StrAppend(&expected, sep, "'", std::string(c), "'");
        ++i;
    }
    return absl::InvalidArgumentError(absl::StrCat(name, "='", env, "': expected ", expected));
}

}  // namespace

absl::StatusOr<AttentionCore> attention_core_from_env() {
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    DT_RETURN_IF_ERROR(check_env_choice("DELTATUNE_ATTENTION", {"wgmma", "cudnn", "flash"}));
#else
    // No cuDNN attention in this build.
    DT_RETURN_IF_ERROR(check_env_choice("DELTATUNE_ATTENTION", {"wgmma", "flash"}));
#endif
    const char* env = std::getenv("DELTATUNE_ATTENTION");
    const std::string asked = env ? env : "";
    if (asked == "flash") return AttentionCore::kFlash;
    if (asked == "cudnn") return AttentionCore::kCudnn;
    return AttentionCore::kWgmma;
}

const char* attention_core_name(AttentionCore core) {
    switch (core) {
        case AttentionCore::kCudnn:
            return "cudnn";
        case AttentionCore::kFlash:
            return "flash";
        case AttentionCore::kWgmma:
            break;
    }
    return "wgmma";
}

bool gemm_times_candidates() {
    // The heuristic's first by default: the 27B-slice step measured no faster with timed choices
    // (18,874-19,401 vs 18,936-19,545 tokens/s over 7 runs), and the first is the same algorithm
    // in every process.
    const char* env = std::getenv("DELTATUNE_GEMM");
    return env != nullptr && std::string(env) == "timed";
}

absl::Status check_gemm_choice() {
    return check_env_choice("DELTATUNE_GEMM", {"timed", "heuristic"});
}

absl::StatusOr<CudnnAttention*> DeviceContext::cudnn_attention() const {
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    if (device_.is_cpu() || attention_core_ != AttentionCore::kCudnn) return nullptr;
    if (!cudnn_attention_) {
        DT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.index));
        DT_ASSIGN_OR_RETURN(cudnn_attention_, CudnnAttention::create());
    }
    return cudnn_attention_.get();
#else
    return nullptr;
#endif
}

absl::StatusOr<std::unique_ptr<DeviceContext>> DeviceContext::create(Device device) {
    std::unique_ptr<DeviceContext> ctx(new DeviceContext(device));
    if (device.is_cpu()) return ctx;
    // Before any GPU work: a typo is not a default.
    DT_ASSIGN_OR_RETURN(ctx->attention_core_, attention_core_from_env());
    DT_RETURN_IF_ERROR(check_gemm_choice());
    std::string why;
    const int n = cuda_device_count(&why);
    if (device.index < 0 || device.index >= n) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot use ", device.to_string(), ": ",
                         n == 0 ? why : absl::StrCat(n, " CUDA devices present")));
    }
#if DELTATUNE_HAVE_CUDA
    DT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.index));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ctx->compute_, cudaStreamNonBlocking));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ctx->comm_, cudaStreamNonBlocking));
    DT_ASSIGN_OR_RETURN(ctx->gpu_, probe_gpu_arch(device.index));
    DT_ASSIGN_OR_RETURN(ctx->allocator_, CudaAllocator::create(device.index));
    constexpr size_t kGemmWorkspace = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper
    DT_ASSIGN_OR_RETURN(ctx->gemm_workspace_,
                        ctx->allocator_->allocate(kGemmWorkspace, ctx->compute_));
    DT_ASSIGN_OR_RETURN(ctx->gemm_, Gemm::create(ctx->gemm_workspace_.get(), kGemmWorkspace,
                                                 gemm_times_candidates()));
    cublasHandle_t blas = nullptr;
    DT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas));
    ctx->blas_ = blas;
#endif
    return ctx;
}

DeviceContext::DeviceContext(Device d) : device_(d) {}

DeviceContext::~DeviceContext() {
#if DELTATUNE_HAVE_CUDA
    if (compute_) cudaStreamSynchronize(compute_);
    cudnn_attention_.reset();
    if (blas_) cublasDestroy(blas_);
    gemm_.reset();
    gemm_workspace_.reset();
    if (compute_) cudaStreamSynchronize(compute_);
    allocator_.reset();
    if (compute_) cudaStreamDestroy(compute_);
    if (comm_) cudaStreamDestroy(comm_);
#endif
}

absl::StatusOr<DeviceMemory> DeviceContext::allocate(size_t bytes) const {
    if (!allocator_) {
        return absl::FailedPreconditionError(
            absl::StrCat("no device memory on ", device_.to_string()));
    }
    return allocator_->allocate(bytes, compute_);
}

absl::Status DeviceContext::synchronize() const {
#if DELTATUNE_HAVE_CUDA
    if (compute_) DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
    if (comm_) DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(comm_));
#endif
    return absl::OkStatus();
}

}  // namespace deltatune
