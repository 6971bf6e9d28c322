// cuBLAS, cuBLASLt and NVRTC loaded on first call instead of at process start.
//
// Linked the usual way, these libraries cost every deltatune process about 245 MB of resident
// memory before main() (cuBLASLt's static initialisers alone touch 210 MB), although only GPU
// ranks ever call them: CPU ranks, the CLI and the daemon paid it for nothing. The functions the
// project (and the cuDNN frontend) calls are defined here with the headers' own signatures (the
// compiler checks each against its declaration) and forward to the library, opened with dlopen
// the first time one of its functions runs. A library that cannot be opened makes its functions
// return the library's "not initialised" status, with one message on stderr naming the library.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdio>
#include <mutex>
#include <string>

namespace {

enum Library { kCublas, kCublasLt, kNvrtc, kNumLibraries };

std::string soname(Library lib) {
    const std::string major = std::to_string(CUDART_VERSION / 1000);
    switch (lib) {
        case kCublas:
            return "libcublas.so." + major;
        case kCublasLt:
            return "libcublasLt.so." + major;
        case kNvrtc:
            return "libnvrtc.so." + major;
        default:
            return "";
    }
}

void* library(Library lib) {
    static std::once_flag once[kNumLibraries];
    static void* handle[kNumLibraries] = {};
    std::call_once(once[lib], [lib] {
        const std::string name = soname(lib);
        handle[lib] = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle[lib])
            std::fprintf(stderr, "deltatune: cannot load %s: %s\n", name.c_str(), dlerror());
    });
    return handle[lib];
}

// The library's definition of `name`, typed as a function returning R from arguments A (the
// wrapper's own parameter types), or null.
template <typename R, typename... A>
auto resolve_as(Library lib, const char* name, R, A...) -> R (*)(A...) {
    void* h = library(lib);
    return h ? reinterpret_cast<R (*)(A...)>(dlsym(h, name)) : nullptr;
}

}  // namespace

// Calls the library's `name` with the wrapper's arguments, or returns `missing` when it could not
// be loaded. The function pointer is looked up once per wrapper.
#define DT_FORWARD(lib, name, missing, ...)                                  \
    do {                                                                     \
        static const auto fn = resolve_as(lib, #name, missing, __VA_ARGS__); \
        return fn ? fn(__VA_ARGS__) : (missing);                             \
    } while (0)
#define DT_BLAS(name, ...) DT_FORWARD(kCublas, name, CUBLAS_STATUS_NOT_INITIALIZED, __VA_ARGS__)
#define DT_LT(name, ...) DT_FORWARD(kCublasLt, name, CUBLAS_STATUS_NOT_INITIALIZED, __VA_ARGS__)
#define DT_NVRTC(name, ...) DT_FORWARD(kNvrtc, name, NVRTC_ERROR_INTERNAL_ERROR, __VA_ARGS__)

extern "C" {

// cuBLAS
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
    DT_BLAS(cublasCreate_v2, handle);
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    DT_BLAS(cublasDestroy_v2, handle);
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    DT_BLAS(cublasSetStream_v2, handle, stream);
}
const char* cublasGetStatusName(cublasStatus_t status) {
    DT_FORWARD(kCublas, cublasGetStatusName, "CUBLAS (library not loaded)", status);
}
const char* cublasGetStatusString(cublasStatus_t status) {
    DT_FORWARD(kCublas, cublasGetStatusString, "cuBLAS could not be loaded", status);
}
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
    DT_BLAS(cublasGemmEx, handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
            beta, C, Ctype, ldc, computeType, algo);
}

// cuBLASLt
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    DT_LT(cublasLtCreate, handle);
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    DT_LT(cublasLtDestroy, handle);
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
    DT_LT(cublasLtMatmul, handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
          workspace, workspace_bytes, stream);
}
cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                       cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                       cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                       const cublasLtMatmulAlgo_t* algo,
                                       cublasLtMatmulHeuristicResult_t* result) {
    DT_LT(cublasLtMatmulAlgoCheck, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, algo, result);
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
    DT_LT(cublasLtMatmulAlgoGetHeuristic, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference,
          requested, results, returned);
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    DT_LT(cublasLtMatmulDescCreate, desc, compute, scale);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    DT_LT(cublasLtMatmulDescDestroy, desc);
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t bytes) {
    DT_LT(cublasLtMatmulDescSetAttribute, desc, attr, buf, bytes);
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    DT_LT(cublasLtMatmulPreferenceCreate, pref);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    DT_LT(cublasLtMatmulPreferenceDestroy, pref);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
    DT_LT(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    DT_LT(cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    DT_LT(cublasLtMatrixLayoutDestroy, layout);
}

// NVRTC (the cuDNN frontend's runtime-compiled engines)
nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name,
                               int num_headers, const char* const* headers,
                               const char* const* include_names) {
    DT_NVRTC(nvrtcCreateProgram, prog, src, name, num_headers, headers, include_names);
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options, const char* const* options) {
    DT_NVRTC(nvrtcCompileProgram, prog, num_options, options);
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
    DT_NVRTC(nvrtcDestroyProgram, prog);
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
    DT_NVRTC(nvrtcGetCUBIN, prog, cubin);
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* bytes) {
    DT_NVRTC(nvrtcGetCUBINSize, prog, bytes);
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
    DT_NVRTC(nvrtcGetProgramLog, prog, log);
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* bytes) {
    DT_NVRTC(nvrtcGetProgramLogSize, prog, bytes);
}

}  // extern "C"
