// The one translation from CUDA errors to absl::Status: keeps the failing statement and its
// location. Out-of-memory is ResourceExhausted; errors that poison the context are Internal and
// say so, so the worker can be replaced.
#pragma once

#include "absl/status/status.h"

namespace deltatune {

// `err` is a cudaError_t (int here so CPU-only translation units can include this header).
absl::Status cuda_status(int err, const char* stmt, const char* file, int line);
// `status` is a cublasStatus_t (cuBLAS and cuBLASLt share it). Allocation failures are
// ResourceExhausted, unsupported shapes or values InvalidArgument, the rest Internal.
absl::Status cublas_status(int status, const char* stmt, const char* file, int line);

}  // namespace deltatune

#define DT_CUDA_RETURN_IF_ERROR(expr)                                                 \
    do {                                                                              \
        if (const int dt_cuda_err_ = static_cast<int>(expr); dt_cuda_err_ != 0)       \
            return ::deltatune::cuda_status(dt_cuda_err_, #expr, __FILE__, __LINE__); \
    } while (0)

#define DT_CUBLAS_RETURN_IF_ERROR(expr)                                                 \
    do {                                                                                \
        if (const int dt_blas_err_ = static_cast<int>(expr); dt_blas_err_ != 0)         \
            return ::deltatune::cublas_status(dt_blas_err_, #expr, __FILE__, __LINE__); \
    } while (0)
