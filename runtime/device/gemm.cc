// cuBLASLt GEMM wrapper: row-major problems mapped onto column-major cuBLASLt calls
// (C^T = op(B)^T op(A)^T), one algorithm per problem key, cached. With time_candidates a size
// bucket's first call times the heuristic's top candidates on the real operands (into a scratch
// copy of C, so accumulating calls are unharmed): the heuristic's first choice trails the
// fastest by up to 10% on some of Qwen3.5's weight-gradient GEMMs alone
// (tests/bench/gemm_bench.cc).
#include "runtime/device/gemm.h"

#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
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

// Sizes up to 64 as they are; larger ones rounded up to a multiple of an eighth of their
// power-of-two floor (7561 tokens -> 7680, 8192 -> 8192): buckets at most 12.5% wide.
int64_t size_bucket(int64_t d) {
    if (d <= 64) return d;
    int64_t floor2 = 64;
    while (floor2 * 2 <= d) floor2 *= 2;
    const int64_t step = floor2 / 8;
    return (d + step - 1) / step * step;
}

constexpr int kCandidates = 8;       // cuBLASLt offers 8 for each of Qwen3.5's linear layers
constexpr int kTimedRuns = 3;        // per candidate, after one warm-up run
constexpr double kKeepFirst = 0.97;  // another candidate must be 3% faster (timing noise ~1-2%)

// The fastest of `found` candidates for x, timed on a scratch copy of C (synchronises the
// stream); nullopt where timing cannot happen (a graph capture, no memory for the scratch).
absl::StatusOr<std::optional<int>> fastest(cublasLtHandle_t handle, const GemmArgs& x,
                                           const Descs& d,
                                           const cublasLtMatmulHeuristicResult_t* results,
                                           int found, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
    // Timing serialises the stream with the host, so it happens on a bucket's first call only
    // and never inside a graph capture.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    DT_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return std::nullopt;
    struct Scratch {  // C's stand-in and the two events, released on every path
        cudaStream_t stream;
        void* c = nullptr;
        cudaEvent_t start = nullptr, stop = nullptr;
        ~Scratch() {
            if (stop) cudaEventDestroy(stop);
            if (start) cudaEventDestroy(start);
            // Back to the device now (the default pool keeps nothing past a synchronisation):
            // the scratch may be hundreds of MB, outside the memory plan.
            if (c && cudaFreeAsync(c, stream) == cudaSuccess) cudaStreamSynchronize(stream);
        }
    } t{stream};
    const size_t elem = x.c_type == GemmOut::kBF16 ? 2 : 4;
    const size_t c_bytes = static_cast<size_t>((x.m - 1) * x.ldc + x.n) * elem;
    if (cudaMallocAsync(&t.c, c_bytes, stream) != cudaSuccess) {
        (void)cudaGetLastError();  // no room to time now: a later call of the bucket tries again
        t.c = nullptr;
        return std::nullopt;
    }
    // C's real contents: the bits a GEMM multiplies change its power draw and so its clocks.
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.c, x.c, c_bytes, cudaMemcpyDeviceToDevice, stream));
    DT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t.start));
    DT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t.stop));
    int best = -1;
    float best_ms = 0, first_ms = -1;
    for (int i = 0; i < found; ++i) {
        auto matmul = [&] {
            return cublasLtMatmul(handle, d.op, &x.alpha, x.b, d.a, x.a, d.b, &x.beta, t.c, d.c,
                                  t.c, d.c, &results[i].algo, workspace, workspace_bytes, stream);
        };
        if (matmul() != CUBLAS_STATUS_SUCCESS) continue;  // this candidate cannot run the shape
        DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(t.start, stream));
        bool ran = true;
        for (int r = 0; r < kTimedRuns; ++r) ran = ran && matmul() == CUBLAS_STATUS_SUCCESS;
        DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(t.stop, stream));
        DT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(t.stop));
        if (!ran) continue;
        float ms = 0;
        DT_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, t.start, t.stop));
        if (i == 0) first_ms = ms;
        if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    }
    // The first candidate stays unless another is clearly faster: choices stable across runs.
    if (best < 0 || (first_ms >= 0 && best_ms > kKeepFirst * first_ms)) return 0;
    return best;
}

bool is_fp8(const GemmArgs& x) {
    return x.a_type != GemmIn::kBF16;
}

cudaDataType_t data_type(GemmIn t) {
    return t == GemmIn::kBF16 ? CUDA_R_16BF
                              : (t == GemmIn::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2);
}

// What an FP8 problem must satisfy (the one layout Hopper's FP8 GEMMs take), with the reason.
absl::Status check_fp8(const GemmArgs& x) {
    if ((x.a_type == GemmIn::kBF16) != (x.b_type == GemmIn::kBF16)) {
        return absl::InvalidArgumentError("gemm: one FP8 operand and one bf16");
    }
    if (!is_fp8(x)) return absl::OkStatus();
    if (x.trans_a || !x.trans_b) {
        return absl::InvalidArgumentError("gemm: FP8 takes C = A B^T only (A and B k-major)");
    }
    if (x.k % 16 != 0 || x.lda % 16 != 0 || x.ldb % 16 != 0) {
        return absl::InvalidArgumentError(absl::StrCat("gemm: FP8 needs k and the leading ",
                                                       "dimensions multiples of 16, got k ", x.k,
                                                       ", lda ", x.lda, ", ldb ", x.ldb));
    }
    if (x.a_scale == nullptr || x.b_scale == nullptr) {
        return absl::InvalidArgumentError("gemm: FP8 operands without their scales");
    }
    return absl::OkStatus();
}

// The FP8 part of a problem's key: formats, scale mode, accumulation.
int fp8_key(const GemmArgs& x) {
    return static_cast<int>(x.a_type) | static_cast<int>(x.b_type) << 2 |
           (x.per_tensor_scale ? 1 : 0) << 4 | (x.fast_accum ? 1 : 0) << 5;
}

// The scales of an FP8 call: per call, since the descriptors are shared by every call of a shape.
absl::Status set_scale_pointers(const GemmArgs& x, cublasLtMatmulDesc_t op) {
    if (!is_fp8(x)) return absl::OkStatus();
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &x.b_scale, sizeof(x.b_scale)));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x.a_scale, sizeof(x.a_scale)));
    return absl::OkStatus();
}

// The scale modes and accumulation of an FP8 problem (A' = B, B' = A, as below).
absl::Status set_fp8_attributes(const GemmArgs& x, cublasLtMatmulDesc_t op) {
    const int32_t mode = x.per_tensor_scale ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
                                            : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    DT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    DT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
    const int8_t fast = x.fast_accum ? 1 : 0;
    DT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    return set_scale_pointers(x, op);
}

// The operation and layouts of x. Column-major view: C' (n x m) = op(B') (n x k) op(A') (k x m),
// A' = B, B' = A.
absl::Status make_descs(const GemmArgs& x, Descs* out) {
    Descs& d = *out;
    const uint64_t mm = static_cast<uint64_t>(x.n), nn = static_cast<uint64_t>(x.m);
    const uint64_t kk = static_cast<uint64_t>(x.k);
    const cudaDataType_t ct = x.c_type == GemmOut::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (is_fp8(x)) DT_RETURN_IF_ERROR(set_fp8_attributes(x, d.op));
    const cublasOperation_t ta = x.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = x.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    DT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    DT_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    // Stored shapes (column-major rows x cols) of A' = B and B' = A.
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(
        &d.a, data_type(x.b_type), x.trans_b ? kk : mm, x.trans_b ? mm : kk, x.ldb));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(
        &d.b, data_type(x.a_type), x.trans_a ? nn : kk, x.trans_a ? kk : nn, x.lda));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d.c, ct, mm, nn, x.ldc));
    return absl::OkStatus();
}

// Up to `want` candidates for d's problem under the workspace and the operands' alignments.
absl::Status query_heuristic(cublasLtHandle_t handle, Descs& d, size_t workspace_bytes,
                             const int alignments[3], int want,
                             cublasLtMatmulHeuristicResult_t* results, int* found) {
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&d.pref));
    const uint64_t ws = workspace_bytes;
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t aa = alignments[0], ab = alignments[1], ac = alignments[2];
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac)));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof(ac)));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c,
                                                             d.pref, want, results, found));
    return absl::OkStatus();
}

}  // namespace

// A problem's algorithm and, for a cached shape, its descriptors: created once, they save the
// host the six descriptor calls of every later call of that shape (docs/performance.md "Measured
// choices").
struct Gemm::Algo {
    cublasLtMatmulAlgo_t algo;
    std::shared_ptr<const Descs> descs;
};

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::create(void* workspace, size_t workspace_bytes,
                                                   bool time_candidates) {
    std::unique_ptr<Gemm> g(new Gemm());
    g->time_candidates_ = time_candidates;
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
    DT_RETURN_IF_ERROR(check_fp8(x));
    const auto t_start = std::chrono::steady_clock::now();
    ++stats_.calls;
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
                  al_a * 1000000 + al_b * 1000 + al_c,
                  fp8_key(x)};
    auto it = cache_.find(key);
    if (it != cache_.end()) return matmul(x, *it->second, stream, t_start);
    auto descs = std::make_shared<Descs>();
    Descs& d = *descs;
    DT_RETURN_IF_ERROR(make_descs(x, &d));
    // A timed choice serves every shape of its bucket: the token count changes from batch to
    // batch, and timing each new count would cost more than the choice saves. (Worked out on a
    // miss only: hits are every call of a step.)
    Key bucket = key;
    if (time_candidates_) {
        std::get<0>(bucket) = size_bucket(x.m);
        std::get<1>(bucket) = size_bucket(x.n);
        std::get<2>(bucket) = size_bucket(x.k);
        if (auto t = timed_.find(bucket); t != timed_.end()) {
            cublasLtMatmulHeuristicResult_t check = {};
            if (cublasLtMatmulAlgoCheck(handle_, d.op, d.a, d.b, d.c, d.c, &t->second->algo,
                                        &check) == CUBLAS_STATUS_SUCCESS &&
                check.workspaceSize <= workspace_bytes_) {
                it =
                    cache_.emplace(key, std::make_shared<Algo>(Algo{t->second->algo, descs})).first;
            }
        }
    }
    if (it == cache_.end()) {
        const int alignments[3] = {al_a, al_b, al_c};
        cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
        int found = 0;
        ++stats_.heuristic_queries;
        DT_RETURN_IF_ERROR(query_heuristic(handle_, d, workspace_bytes_, alignments,
                                           time_candidates_ ? kCandidates : 1, results, &found));
        if (found == 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("cuBLASLt has no algorithm for a (", x.m, " x ", x.k, ") x (", x.k,
                             " x ", x.n, ") GEMM with these layouts",
                             !is_fp8(x)           ? ""
                             : x.per_tensor_scale ? " (FP8, per-tensor scales)"
                                                  : " (FP8, per-row scales)"));
        }
        std::optional<int> timed;
        if (found > 1) {
            DT_ASSIGN_OR_RETURN(timed, fastest(handle_, x, d, results, found, workspace_,
                                               workspace_bytes_, stream));
        }
        const int chosen = timed.value_or(0);
        auto algo = std::make_shared<Algo>(Algo{results[chosen].algo, descs});
        if (timed) {  // a bucket's choice only where candidates were timed
            if (timed_.count(bucket) == 0) ++timed_buckets_;
            if (chosen != 0) ++retuned_;
            timed_[bucket] = algo;
        }
        it = cache_.emplace(key, std::move(algo)).first;
    }
    return matmul(x, *it->second, stream, t_start);
}

absl::Status Gemm::matmul(const GemmArgs& x, const Algo& algo, cudaStream_t stream,
                          std::chrono::steady_clock::time_point t_start) {
    const Descs& d = *algo.descs;
    DT_RETURN_IF_ERROR(set_scale_pointers(x, d.op));
    DT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, d.op, &x.alpha, x.b, d.a, x.a, d.b, &x.beta,
                                             x.c, d.c, x.c, d.c, &algo.algo, workspace_,
                                             workspace_bytes_, stream));
    stats_.host_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - t_start)
                          .count();
    return absl::OkStatus();
}

#else

struct Gemm::Algo {};
absl::StatusOr<std::unique_ptr<Gemm>> Gemm::create(void*, size_t, bool) {
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
