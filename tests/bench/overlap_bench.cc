// Can AdamW (memory-bound) run beside the forward's GEMMs (compute-bound) for less than it costs
// alone? Run side by side on all multiprocessors, the GEMMs' persistent grids wait for the
// update's blocks and slow by about the update's time. Here the update is confined to k blocks
// of 1024 threads (adamw_multi_tensor_step's max_blocks) and the GEMMs are told to use the other
// multiprocessors (cuBLASLt's SM_COUNT_TARGET): the pair pays off when k multiprocessors move
// the update's bytes at a larger share of the bandwidth than k / SMs.
// `kernels_bench "[overlap_bench]"` on the GPU machine.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kernels/adamw.h"
#include "tests/bench/bench_util.h"
#include "tests/kernels/cuda_test_util.h"

#if DELTATUNE_HAVE_CUDA
#include <cublasLt.h>
#endif

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;
using namespace bench;

#define OVERLAP_LT(expr) REQUIRE((expr) == CUBLAS_STATUS_SUCCESS)

// y (tokens x out, bf16) = x W^T, the MLP gate/up shape of Qwen3.5-27B at 8192 tokens, with the
// heuristic's first algorithm for a given multiprocessor target (0: all).
struct MlpGemm {
    static constexpr uint64_t kTokens = 8192, kIn = 5120, kOut = 17408;
    static constexpr size_t kWorkspace = size_t{32} << 20;
    cublasLtHandle_t h = nullptr;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
    DeviceBuffer<uint16_t> w{Bf16Fill{kIn * kOut, 0.02f}}, x{Bf16Fill{kTokens * kIn, 1.0f}};
    DeviceBuffer<uint16_t> y{kTokens * kOut};
    DeviceBuffer<char> ws{kWorkspace};

    explicit MlpGemm(int sm_target) {
        OVERLAP_LT(cublasLtCreate(&h));
        OVERLAP_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
        OVERLAP_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
        OVERLAP_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
        if (sm_target > 0) {
            OVERLAP_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                                      &sm_target, sizeof(sm_target)));
        }
        OVERLAP_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, kIn, kOut, kIn));
        OVERLAP_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, kIn, kTokens, kIn));
        OVERLAP_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, kOut, kTokens, kOut));
        cublasLtMatmulPreference_t pref = nullptr;
        OVERLAP_LT(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t bytes = kWorkspace;
        OVERLAP_LT(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
        cublasLtMatmulHeuristicResult_t found{};
        int count = 0;
        OVERLAP_LT(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &found, &count));
        REQUIRE(count == 1);
        algo = found.algo;
        cublasLtMatmulPreferenceDestroy(pref);
    }
    ~MlpGemm() {
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatmulDescDestroy(op);
        cublasLtDestroy(h);
    }
    cudaError_t run(cudaStream_t s) {
        const float alpha = 1.0f, beta = 0.0f;
        const cublasStatus_t st =
            cublasLtMatmul(h, op, &alpha, w.get(), la, x.get(), lb, &beta, y.get(), lc, y.get(), lc,
                           &algo, ws.get(), kWorkspace, s);
        return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
    }
    double tflop() const { return 2.0 * kTokens * kIn * kOut / 1e12; }
};

// One fp32 parameter tensor with its moments and gradient, updated in one launch.
struct Update {
    int64_t n;
    DeviceBuffer<float> p, m, v, g;
    DeviceBuffer<uint16_t> half;
    DeviceBuffer<AdamWTensorArgs> args{1};
    int64_t chunks = 0;
    explicit Update(int64_t numel)
        : n(numel),
          p(F32Fill{static_cast<size_t>(numel), 0.02f}),
          m(static_cast<size_t>(numel)),
          v(static_cast<size_t>(numel)),
          g(F32Fill{static_cast<size_t>(numel), 1.0f}),
          half(static_cast<size_t>(numel)) {
        AdamWTensorArgs t{
            p.get(), m.get(), v.get(), g.get(), reinterpret_cast<__nv_bfloat16*>(half.get()), n, 0};
        chunks = adamw_plan_chunks(&t, 1);
        REQUIRE(cudaMemcpy(args.get(), &t, sizeof(t), cudaMemcpyHostToDevice) == cudaSuccess);
    }
    cudaError_t run(cudaStream_t s, int max_blocks) {
        return adamw_multi_tensor_step(args.get(), 1, chunks, AdamWHyper{}, 1, nullptr, s,
                                       max_blocks);
    }
    double gigabytes() const { return 30.0 * static_cast<double>(n) / 1e9; }  // 4 reads, 4 writes
};

double elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    REQUIRE(cudaEventElapsedTime(&ms, a, b) == cudaSuccess);
    return ms;
}

TEST_CASE("AdamW confined to k multiprocessors beside GEMMs on the others",
          "[bench][overlap_bench]") {
    if (!have_gpu()) return;
    int sms = 0;
    REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
    constexpr int kGemms = 20;
    Update update(int64_t{1} << 30);  // 32 GB moved: about the 27B slice's whole update
    cudaStream_t ga = nullptr, ub = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&ga, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&ub, cudaStreamNonBlocking) == cudaSuccess);
    cudaEvent_t t0, ta, tb;
    for (cudaEvent_t* e : {&t0, &ta, &tb}) REQUIRE(cudaEventCreate(e) == cudaSuccess);

    MlpGemm all(0);
    auto gemms = [&](MlpGemm& g) {
        return [&] {
            for (int i = 0; i < kGemms; ++i) {
                if (cudaError_t e = g.run(nullptr); e != cudaSuccess) return e;
            }
            return cudaSuccess;
        };
    };
    const double gemm_ms = median_ms(gemms(all), 3);
    const double update_ms = median_ms([&] { return update.run(nullptr, 0); }, 3);
    std::printf("alone: %d GEMMs %.2f ms (%.0f TFLOP/s), AdamW %.2f ms (%.0f GB/s), serial %.2f\n",
                kGemms, gemm_ms, kGemms * all.tflop() / gemm_ms * 1e3, update_ms,
                update.gigabytes() / update_ms * 1e3, gemm_ms + update_ms);
    // saved: the update's time alone minus the GEMM work lost while it ran beside them (the
    // GEMMs ran on sms - k multiprocessors throughout; in a step they would only while it runs).
    std::printf("%4s %12s %12s %12s %12s %12s %9s\n", "k", "GEMMs alone", "AdamW alone",
                "GEMMs beside", "AdamW beside", "AdamW GB/s", "saved");
    for (int k : {8, 16, 24, 32, 48}) {
        MlpGemm rest(sms - k);
        const double rest_ms = median_ms(gemms(rest), 3);
        const double confined_ms = median_ms([&] { return update.run(nullptr, k); }, 3);
        std::vector<double> g_ms, u_ms;
        for (int round = 0; round < 3; ++round) {
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            REQUIRE(cudaEventRecord(t0, ub) == cudaSuccess);
            REQUIRE(cudaStreamWaitEvent(ga, t0, 0) == cudaSuccess);
            REQUIRE(update.run(ub, k) == cudaSuccess);  // first: its blocks take k SMs
            REQUIRE(cudaEventRecord(tb, ub) == cudaSuccess);
            for (int i = 0; i < kGemms; ++i) REQUIRE(rest.run(ga) == cudaSuccess);
            REQUIRE(cudaEventRecord(ta, ga) == cudaSuccess);
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            g_ms.push_back(elapsed_ms(t0, ta));
            u_ms.push_back(elapsed_ms(t0, tb));
        }
        const double g_beside = median(g_ms), u_beside = median(u_ms);
        const double lost = std::min(u_beside, g_beside) * (1.0 - gemm_ms / g_beside);
        std::printf("%4d %12.2f %12.2f %12.2f %12.2f %12.0f %9.2f\n", k, rest_ms, confined_ms,
                    g_beside, u_beside, update.gigabytes() / u_beside * 1e3, update_ms - lost);
        std::fflush(stdout);
    }
    for (cudaEvent_t e : {t0, ta, tb}) cudaEventDestroy(e);
    cudaStreamDestroy(ga);
    cudaStreamDestroy(ub);
}
#endif

}  // namespace
}  // namespace deltatune
