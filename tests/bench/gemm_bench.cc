// Does runtime/device/gemm.cc run cuBLASLt's fastest algorithm for each shape? For each linear
// layer of Qwen3.5-27B at 8192 tokens, in the three forms the runtime uses (y = x W^T, dx = dy W,
// dW += dy^T x in fp32), every algorithm the heuristic offers (up to kCandidates) is timed; the
// row prints the heuristic's first choice's TFLOP/s (what the runtime runs by default), the best
// one's and its rank, and what the runtime's Gemm achieves through linear_forward / _backward_dx /
// _backward_dw with DELTATUNE_GEMM=timed (it times the candidates on a shape's first call and
// keeps the fastest), the last three timed in turns.
// `kernels_bench "[gemm_bench]"` on the GPU machine. The buffers are cudaMalloc'd (256-byte
// aligned), as cuBLASLt's alignment preferences assume by default, so the heuristic sees what
// gemm.cc's 256-byte-aligned calls show it; dx is timed with beta 0 (the runtime also accumulates
// dx with beta 1 where two branches meet) and dW with beta 1. dx/K and dW/K: the same products
// with both operands K-major, the forward's layout (W^T, and dy^T and x^T, stored).
#include <catch2/catch.hpp>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kernels/loss/fused_linear_cross_entropy.h"
#include "runtime/device/gemm.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/qwen27b_shapes.h"
#include "tests/kernels/common/cuda_test_util.h"

#if DELTATUNE_HAVE_CUDA
#include <cublasLt.h>
#endif

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;
using namespace bench;

constexpr int kCandidates = 16;
constexpr size_t kWorkspace = size_t{32}
                              << 20;  // as the runtime gives cuBLASLt (device_context.cc)

#define BENCH_LT(expr) REQUIRE((expr) == CUBLAS_STATUS_SUCCESS)

// One column-major cuBLASLt problem D (m x n) = op(A) op(B) (+ D), as gemm.cc maps a row-major
// one: transposes, stored shapes and leading dimensions given.
struct Problem {
    cublasOperation_t ta, tb;
    uint64_t a_rows, a_cols, b_rows, b_cols, m, n;
    int64_t lda, ldb, ldc;
    cudaDataType_t out;
    float beta;
};

struct Row {
    double first_ms = 0, best_ms = 0, runtime_ms = 0;
    int best_rank = 0, offered = 0;
};

// Times every candidate to find the fastest, then the first, the fastest and the runtime's call
// (`runtime`) in interleaved rounds: sustained GEMMs heat the GPU and lower its clocks, so timings
// taken one after another would favour whatever ran first.
Row time_candidates(cublasLtHandle_t h, const Problem& p, const void* a, const void* b, void* c,
                    void* ws, const std::function<cudaError_t()>& runtime) {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    BENCH_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    BENCH_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof(p.ta)));
    BENCH_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof(p.tb)));
    BENCH_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.a_rows, p.a_cols, p.lda));
    BENCH_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.b_rows, p.b_cols, p.ldb));
    BENCH_LT(cublasLtMatrixLayoutCreate(&lc, p.out, p.m, p.n, p.ldc));
    BENCH_LT(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws_bytes = kWorkspace;
    BENCH_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws_bytes, sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t found[kCandidates] = {};
    int count = 0;
    BENCH_LT(
        cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, kCandidates, found, &count));
    REQUIRE(count > 0);
    Row row;
    row.offered = count;
    const float alpha = 1.0f;
    auto candidate = [&](int i) {
        return [&, i] {
            const cublasStatus_t s = cublasLtMatmul(h, op, &alpha, a, la, b, lb, &p.beta, c, lc, c,
                                                    lc, &found[i].algo, ws, kWorkspace, nullptr);
            return s == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
        };
    };
    double best = 0;
    for (int i = 0; i < count; ++i) {
        const double ms = median_ms(candidate(i), 5);
        if (i == 0 || ms < best) best = ms, row.best_rank = i;
    }
    REQUIRE(runtime() == cudaSuccess);  // the runtime's first call of a shape times candidates
    std::vector<double> first, fastest, ours;
    for (int round = 0; round < 10; ++round) {
        first.push_back(median_ms(candidate(0), 1, 0));
        fastest.push_back(median_ms(candidate(row.best_rank), 1, 0));
        ours.push_back(median_ms(runtime, 1, 0));
    }
    row.first_ms = median(first), row.best_ms = median(fastest), row.runtime_ms = median(ours);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
    return row;
}

TEST_CASE("the runtime's GEMMs against cuBLASLt's first and fastest algorithms, per layer",
          "[bench][gemm_bench]") {
    if (!have_gpu()) return;
    const auto& layers = kLinears;
    cublasLtHandle_t h = nullptr;
    BENCH_LT(cublasLtCreate(&h));
    DeviceBuffer<char> ws(kWorkspace);
    auto runtime_gemm = Gemm::create(ws.get(), kWorkspace, /*time_candidates=*/true);
    REQUIRE(runtime_gemm.ok());
    Gemm& g = **runtime_gemm;
    std::printf("%-18s %-5s %10s %10s %6s %8s %12s\n", "linear (8192 tok)", "form", "first TF/s",
                "best TF/s", "rank", "offered", "timed TF/s");
    for (const LinearShape& l : layers) {
        const size_t xn = static_cast<size_t>(kTokens * l.in),
                     yn = static_cast<size_t>(kTokens * l.out);
        const size_t wn = static_cast<size_t>(l.in * l.out);
        DeviceBuffer<uint16_t> x(Bf16Fill{xn, 1.0f}), w(Bf16Fill{wn, 0.02f}), y(yn),
            dy(Bf16Fill{yn, 1.0f}), dx(xn);
        DeviceBuffer<float> dw(wn);
        const uint64_t T = kTokens, K = static_cast<uint64_t>(l.in),
                       N = static_cast<uint64_t>(l.out);
        // Column-major views of the row-major tensors (gemm.cc: C' = op(B') op(A')).
        const Problem fwd{CUBLAS_OP_T, CUBLAS_OP_N, K,    N,     K,           T,   N,
                          T,           l.in,        l.in, l.out, CUDA_R_16BF, 0.0f};  // y^T = W x^T
        const Problem dgrad{
            CUBLAS_OP_N, CUBLAS_OP_N, K,     N,    N,           T,   K,
            T,           l.in,        l.out, l.in, CUDA_R_16BF, 0.0f};  // dx^T = W^T dy^T
        const Problem wgrad{
            CUBLAS_OP_N, CUBLAS_OP_T, K,     T,    N,          T,   K,
            N,           l.in,        l.out, l.in, CUDA_R_32F, 1.0f};  // dW^T += x^T dy
        // The backward's forms in the forward's layout (both operands K-major), as if W^T, and
        // dy^T and x^T, were stored: does the layout, not the shape, cost the backward its rate?
        const Problem dgrad_kmajor{CUBLAS_OP_T, CUBLAS_OP_N, N,     K,    N,           T,   K,
                                   T,           l.out,       l.out, l.in, CUDA_R_16BF, 0.0f};
        const Problem wgrad_kmajor{CUBLAS_OP_T, CUBLAS_OP_N, T, K,    T,          N,   K,
                                   N,           T,           T, l.in, CUDA_R_32F, 1.0f};
        GemmArgs wk;  // dW (out x in) += dy^T (out x T) (x^T)^T, x^T stored (in x T)
        wk.a = dy.get(), wk.lda = kTokens, wk.b = x.get(), wk.trans_b = true, wk.ldb = kTokens;
        wk.c = dw.get(), wk.c_type = GemmOut::kF32, wk.ldc = l.in;
        wk.m = l.out, wk.n = l.in, wk.k = kTokens, wk.beta = 1.0f;
        const double flops = 2.0 * static_cast<double>(T * K * N);
        auto ok = [](const absl::Status& st) { return st.ok() ? cudaSuccess : cudaErrorUnknown; };
        const struct {
            const char* form;
            const Problem& p;
            const void *a, *b;
            void* c;
            std::function<cudaError_t()> runtime;
        } runs[] = {
            {"fwd", fwd, w.get(), x.get(), y.get(),
             [&] { return ok(linear_forward(g, y.get(), x.get(), w.get(), T, l.in, l.out, {})); }},
            {"dx", dgrad, w.get(), dy.get(), dx.get(),
             [&] {
                 return ok(
                     linear_backward_dx(g, dx.get(), dy.get(), w.get(), T, l.in, l.out, false, {}));
             }},
            {"dW", wgrad, x.get(), dy.get(), dw.get(),
             [&] {
                 return ok(linear_backward_dw(g, dw.get(), dy.get(), x.get(), T, l.in, l.out, {}));
             }},
            {"dx/K", dgrad_kmajor, w.get(), dy.get(), dx.get(),
             [&] {
                 return ok(linear_forward(g, dx.get(), dy.get(), w.get(), T, l.out, l.in, {}));
             }},
            {"dW/K", wgrad_kmajor, x.get(), dy.get(), dw.get(), [&] { return ok(g.run(wk, {})); }}};
        for (const auto& r : runs) {
            const Row row = time_candidates(h, r.p, r.a, r.b, r.c, ws.get(), r.runtime);
            std::printf("%-18s %-5s %10.1f %10.1f %6d %8d %12.1f\n", l.name, r.form,
                        flops / row.first_ms / 1e9, flops / row.best_ms / 1e9, row.best_rank,
                        row.offered, flops / row.runtime_ms / 1e9);
            std::fflush(stdout);
        }
    }
    cublasLtDestroy(h);
}

// The LM head (5120 -> 248320, the 27B vocabulary) is the step's largest GEMM set and its slowest
// per FLOP: its three forms at the token counts one chunk of the fused cross-entropy sees, then
// the whole fused op (three GEMMs and the softmax per chunk) on a 7422-token batch (the
// benchmark's mean) at each chunk size. `kernels_bench "[gemm_bench_lm_head]"`.
TEST_CASE("the LM head's GEMMs and the fused cross-entropy by chunk size",
          "[bench][gemm_bench_lm_head]") {
    if (!have_gpu()) return;
    constexpr int64_t kHidden = 5120, kVocab = 248320, kBatch = 7422;
    cublasLtHandle_t h = nullptr;
    BENCH_LT(cublasLtCreate(&h));
    DeviceBuffer<char> ws(kWorkspace);
    auto runtime_gemm = Gemm::create(ws.get(), kWorkspace, /*time_candidates=*/false);
    REQUIRE(runtime_gemm.ok());
    const size_t xn = static_cast<size_t>(8192 * kHidden),
                 wn = static_cast<size_t>(kHidden * kVocab);
    const size_t yn = static_cast<size_t>(8192 * kVocab);
    DeviceBuffer<uint16_t> x(Bf16Fill{xn, 1.0f}), w(Bf16Fill{wn, 0.02f}), y(yn), dx(xn);
    DeviceBuffer<float> dw(wn);
    std::printf("%-18s %-5s %10s %10s %6s %8s\n", "lm_head rows", "form", "first TF/s", "best TF/s",
                "rank", "offered");
    for (int64_t rows : {int64_t{2048}, int64_t{3326}, int64_t{4096}, kBatch}) {
        const uint64_t T = rows, K = kHidden, N = kVocab;
        const Problem fwd{CUBLAS_OP_T, CUBLAS_OP_N, K,       N,      K,           T,   N,
                          T,           kHidden,     kHidden, kVocab, CUDA_R_16BF, 0.0f};
        const Problem dgrad{CUBLAS_OP_N, CUBLAS_OP_N, K,      N,       N,           T,   K,
                            T,           kHidden,     kVocab, kHidden, CUDA_R_16BF, 0.0f};
        const Problem wgrad{CUBLAS_OP_N, CUBLAS_OP_T, K,      T,       N,          T,   K,
                            N,           kHidden,     kVocab, kHidden, CUDA_R_32F, 1.0f};
        const double flops = 2.0 * static_cast<double>(T * K * N);
        const struct {
            const char* form;
            const Problem& p;
            const void *a, *b;
            void* c;
        } runs[] = {{"fwd", fwd, w.get(), x.get(), y.get()},
                    {"dx", dgrad, w.get(), y.get(), dx.get()},
                    {"dW", wgrad, x.get(), y.get(), dw.get()}};
        for (const auto& r : runs) {
            const Row row =
                time_candidates(h, r.p, r.a, r.b, r.c, ws.get(), [] { return cudaSuccess; });
            std::printf("%-18lld %-5s %10.1f %10.1f %6d %8d\n", static_cast<long long>(rows),
                        r.form, flops / row.first_ms / 1e9, flops / row.best_ms / 1e9,
                        row.best_rank, row.offered);
            std::fflush(stdout);
        }
    }
    cublasHandle_t blas = nullptr;
    REQUIRE(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
    std::vector<int32_t> targets(static_cast<size_t>(kBatch));
    for (size_t i = 0; i < targets.size(); ++i)
        targets[i] = static_cast<int32_t>(i * 7919 % kVocab);
    DeviceBuffer<int32_t> d_targets(targets);
    DeviceBuffer<float> row_losses(static_cast<size_t>(kBatch));
    const double flops = 6.0 * static_cast<double>(kBatch * kHidden * kVocab);
    for (int64_t chunk : {int64_t{1024}, int64_t{2048}, int64_t{4096}, int64_t{8192}}) {
        FusedLinearCrossEntropyArgs a;
        a.row_losses = row_losses.get();
        a.dx = bf16_ptr(dx);
        a.dw = dw.get();
        a.x = bf16_ptr(x);
        a.w = bf16_ptr(w);
        a.targets = d_targets.get();
        a.tokens = kBatch, a.hidden = kHidden, a.vocab = kVocab;
        a.grad_scale = 1.0f / kBatch;
        a.chunk_tokens = chunk;
        REQUIRE(fused_linear_cross_entropy_workspace_bytes(a) <= yn * sizeof(uint16_t));
        const double ms = median_ms(
            [&] { return fused_linear_cross_entropy(a, blas, y.get(), yn * 2, nullptr); }, 5);
        std::printf("fused linear cross-entropy, %lld tokens, chunk %5lld: %8.2f ms, %6.1f TF/s\n",
                    static_cast<long long>(kBatch), static_cast<long long>(chunk), ms,
                    flops / ms / 1e9);
        std::fflush(stdout);
        if (chunk != 4096) continue;  // the runtime's chunk: a zeroed dW against a fresh one
        const double zeroed = median_ms(
            [&] {
                const cudaError_t e = cudaMemsetAsync(dw.get(), 0, wn * sizeof(float));
                if (e != cudaSuccess) return e;
                return fused_linear_cross_entropy(a, blas, y.get(), yn * 2, nullptr);
            },
            5);
        a.dw_fresh = true;
        const double fresh = median_ms(
            [&] { return fused_linear_cross_entropy(a, blas, y.get(), yn * 2, nullptr); }, 5);
        std::printf(
            "  dW zeroed, then accumulated: %8.2f ms; fresh (first chunk writes): %8.2f ms\n",
            zeroed, fresh);
    }
    cublasDestroy(blas);
    cublasLtDestroy(h);
}
#endif

}  // namespace
}  // namespace deltatune
