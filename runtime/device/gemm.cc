// cuBLASLt GEMM wrapper: row-major problems mapped onto column-major cuBLASLt calls
// (C^T = op(B)^T op(A)^T), heuristic algorithm per problem key, cached.
#include "runtime/device/gemm.h"

#include "absl/strings/str_cat.h"
#include "runtime/device/cuda_status.h"

#if DELTATUNE_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

#if DELTATUNE_HAVE_CUDA

namespace {

int alignment_of(const void* p) {
    const auto v = reinterpret_cast<uintptr_t>(p);
    int a = 256;
    while (a > 2 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
    return a;
}

// RAII holders for the descriptor handles of one call.
struct Descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~Descs() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

}  // namespace

struct Gemm::Algo {
    cublasLtMatmulAlgo_t algo;
};

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::create(void* workspace, size_t workspace_bytes) {
    std::unique_ptr<Gemm> g(new Gemm());
    cublasLtHandle_t h = nullptr;
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&h));
    g->handle_ = h;
    g->workspace_ = workspace;
    g->workspace_bytes_ = workspace_bytes;
    return g;
}

Gemm::~Gemm() {
    if (handle_) cublasLtDestroy(handle_);
}

absl::Status Gemm::run(const GemmArgs& x, cudaStream_t stream) {
    if (x.m < 0 || x.n < 0 || x.k < 0) return absl::InvalidArgumentError("gemm: negative shape");
    if (x.m == 0 || x.n == 0) return absl::OkStatus();
    if (x.k == 0 && x.beta == 1.0f) return absl::OkStatus();
    // Column-major view: C' (n x m) = op(B') (n x k) op(A') (k x m), A' = B, B' = A.
    const uint64_t mm = static_cast<uint64_t>(x.n), nn = static_cast<uint64_t>(x.m);
    const uint64_t kk = static_cast<uint64_t>(x.k);
    const cudaDataType_t ct = x.c_type == GemmOut::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
    Descs d;
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = x.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = x.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    DT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    DT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    // Stored shapes (column-major rows x cols) of A' = B and B' = A.
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_16BF, x.trans_b ? kk : mm,
                                                         x.trans_b ? mm : kk, x.ldb));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_16BF, x.trans_a ? nn : kk,
                                                         x.trans_a ? kk : nn, x.lda));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d.c, ct, mm, nn, x.ldc));

    const int al_a = alignment_of(x.b), al_b = alignment_of(x.a), al_c = alignment_of(x.c);
    const Key key{x.m,
                  x.n,
                  x.k,
                  x.trans_a,
                  x.trans_b,
                  x.lda,
                  x.ldb,
                  x.ldc,
                  static_cast<int>(x.c_type),
                  x.beta != 0.0f,
                  al_a * 1000000 + al_b * 1000 + al_c};
    auto it = cache_.find(key);
    if (it == cache_.end()) {
        DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&d.pref));
        const uint64_t ws = workspace_bytes_;
        DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
            d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        const uint32_t aa = al_a, ab = al_b, ac = al_c;
        DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
            d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
        DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
            d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)));
        DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
            d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac)));
        DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
            d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof(ac)));
        cublasLtMatmulHeuristicResult_t result = {};
        int found = 0;
        DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c,
                                                                 d.pref, 1, &result, &found));
        if (found == 0) {
            return absl::InvalidArgumentError(absl::StrCat("cuBLASLt has no algorithm for a (", x.m,
                                                           " x ", x.k, ") x (", x.k, " x ", x.n,
                                                           ") GEMM with these layouts"));
        }
        it = cache_.emplace(key, std::make_shared<Algo>(Algo{result.algo})).first;
    }
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, d.op, &x.alpha, x.b, d.a, x.a, d.b, &x.beta,
                                             x.c, d.c, x.c, d.c, &it->second->algo, workspace_,
                                             workspace_bytes_, stream));
    return absl::OkStatus();
}

#else

struct Gemm::Algo {};
absl::StatusOr<std::unique_ptr<Gemm>> Gemm::create(void*, size_t) {
    return absl::FailedPreconditionError("built without CUDA");
}
Gemm::~Gemm() = default;
absl::Status Gemm::run(const GemmArgs&, cudaStream_t) {
    return absl::FailedPreconditionError("built without CUDA");
}

#endif

absl::Status linear_forward(Gemm& g, void* y, const void* x, const void* w, int64_t rows,
                            int64_t in, int64_t out, cudaStream_t stream) {
    GemmArgs a;
    a.a = x, a.lda = in, a.b = w, a.trans_b = true, a.ldb = in, a.c = y, a.ldc = out;
    a.m = rows, a.n = out, a.k = in;
    return g.run(a, stream);
}

absl::Status linear_backward_dx(Gemm& g, void* dx, const void* dy, const void* w, int64_t rows,
                                int64_t in, int64_t out, bool accumulate, cudaStream_t stream) {
    GemmArgs a;
    a.a = dy, a.lda = out, a.b = w, a.ldb = in, a.c = dx, a.ldc = in;
    a.m = rows, a.n = in, a.k = out, a.beta = accumulate ? 1.0f : 0.0f;
    return g.run(a, stream);
}

absl::Status linear_backward_dw(Gemm& g, float* dw, const void* dy, const void* x, int64_t rows,
                                int64_t in, int64_t out, cudaStream_t stream, bool accumulate) {
    GemmArgs a;
    a.a = dy, a.trans_a = true, a.lda = out, a.b = x, a.ldb = in, a.c = dw, a.ldc = in;
    a.c_type = GemmOut::kF32, a.m = out, a.n = in, a.k = rows, a.beta = accumulate ? 1.0f : 0.0f;
    return g.run(a, stream);
}

}  // namespace deltatune
