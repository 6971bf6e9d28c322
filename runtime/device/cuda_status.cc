// cudaError_t -> absl::Status.
#include "runtime/device/cuda_status.h"

#include "absl/strings/str_cat.h"

#if DELTATUNE_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

absl::Status cuda_status(int err, const char* stmt, const char* file, int line) {
    if (err == 0) return absl::OkStatus();
#if DELTATUNE_HAVE_CUDA
    const auto e = static_cast<cudaError_t>(err);
    const std::string msg = absl::StrCat(stmt, " failed at ", file, ":", line, ": ",
                                         cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    switch (e) {
        case cudaErrorMemoryAllocation:
            return absl::ResourceExhaustedError(msg);
        case cudaErrorInvalidValue:
        case cudaErrorInvalidConfiguration:
            return absl::InvalidArgumentError(msg);
        case cudaErrorIllegalAddress:
        case cudaErrorLaunchFailure:
        case cudaErrorHardwareStackError:
        case cudaErrorIllegalInstruction:
        case cudaErrorMisalignedAddress:
            return absl::InternalError(
                absl::StrCat(msg, "; the CUDA context is unusable, restart the worker"));
        default:
            return absl::InternalError(msg);
    }
#else
    // Without the toolkit, still classify out-of-memory (cudaErrorMemoryAllocation is 2).
    const std::string msg =
        absl::StrCat(stmt, " failed at ", file, ":", line, ": CUDA error ", err);
    return err == 2 ? absl::ResourceExhaustedError(msg) : absl::InternalError(msg);
#endif
}

absl::Status cublas_status(int status, const char* stmt, const char* file, int line) {
    if (status == 0) return absl::OkStatus();
#if DELTATUNE_HAVE_CUDA
    const auto s = static_cast<cublasStatus_t>(status);
    const std::string msg =
        absl::StrCat(stmt, " failed at ", file, ":", line, ": ", cublasGetStatusName(s), " (",
                     cublasGetStatusString(s), ")");
    switch (s) {
        case CUBLAS_STATUS_ALLOC_FAILED:
            return absl::ResourceExhaustedError(msg);
        case CUBLAS_STATUS_INVALID_VALUE:
        case CUBLAS_STATUS_NOT_SUPPORTED:
            return absl::InvalidArgumentError(msg);
        default:
            return absl::InternalError(msg);
    }
#else
    return absl::InternalError(
        absl::StrCat(stmt, " failed at ", file, ":", line, ": cuBLAS status ", status));
#endif
}

}  // namespace deltatune
