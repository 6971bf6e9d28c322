// What the Qwen3.5-27B kernel benchmarks (kernels_bench.cc, attention_bench.cc) share: the
// model's shapes, the ceilings measured in the run (a 4 GiB device-to-device copy and an 8192^3
// cuBLAS bf16 GEMM), the printed row, and the packed batch of ultrachat-like documents.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tests/bench/bench_util.h"

namespace deltatune::bench {

constexpr int64_t kTokens = 8192, kHidden = 5120, kQHeads = 24, kKvHeads = 4, kHeadDim = 256,
                  kInter = 17408, kVocab = 248320;

// The linear layers, (in, out): q_proj (q and gate), k/v_proj, o_proj, the MLP, the Gated
// DeltaNet's input projections (q, k, v; z; a, b are 48 wide and left out) and output.
struct LinearShape {
    const char* name;
    int64_t in, out;
};
inline constexpr LinearShape kLinears[] = {
    {"q_proj", 5120, 12288},       {"k_proj", 5120, 1024},      {"o_proj", 6144, 5120},
    {"mlp gate/up", 5120, 17408},  {"mlp down", 17408, 5120},   {"gdn in_proj_qkv", 5120, 10240},
    {"gdn in_proj_z", 5120, 6144}, {"gdn out_proj", 6144, 5120}};

struct Ceilings {
    double copy_gbs = 4300, gemm_tflops = 790;
};

inline void row(const char* name, double ms, double bytes, double flops, const Ceilings& c) {
    if (flops > 0) {
        const double tf = flops / ms / 1e9;
        std::printf("%-34s %9.3f ms %9.1f TFLOP/s %6.1f%% of measured %6.1f%% of 790\n", name, ms,
                    tf, 100 * tf / c.gemm_tflops, 100 * tf / 790);
    } else {
        const double gbs = bytes / ms / 1e6;
        std::printf("%-34s %9.3f ms %9.1f GB/s     %6.1f%% of measured %6.1f%% of 4300\n", name, ms,
                    gbs, 100 * gbs / c.copy_gbs, 100 * gbs / 4300);
    }
    std::fflush(stdout);
}

inline std::vector<int32_t> ultrachat_like_lengths(std::mt19937& rng) {
    std::vector<int32_t> lengths;
    int32_t left = kTokens;
    std::lognormal_distribution<double> len(std::log(900.0), 0.8);
    while (left > 0) {
        int32_t l = std::clamp(static_cast<int32_t>(len(rng)), 16, 4096);
        l = std::min(l, left);
        lengths.push_back(l);
        left -= l;
    }
    return lengths;
}

// Measures the copy and GEMM ceilings into `ceil` and prints them.
inline void measure_ceilings(cublasHandle_t blas, Ceilings& ceil) {
    using cudatest::DeviceBuffer;
    const size_t n = size_t{1} << 31;
    DeviceBuffer<uint16_t> src(Bf16Fill{static_cast<size_t>(n), 1.0f}), dst(n);
    const double ms = median_ms(
        [&] { return cudaMemcpyAsync(dst.get(), src.get(), 2 * n, cudaMemcpyDeviceToDevice); }, 10);
    ceil.copy_gbs = 2.0 * 2 * n / ms / 1e6;
    const int m = 8192;
    DeviceBuffer<uint16_t> a(Bf16Fill{static_cast<size_t>(size_t{1} * m * m), 1.0f}),
        b(Bf16Fill{static_cast<size_t>(size_t{1} * m * m), 1.0f}), c(size_t{1} * m * m);
    const float one = 1, zero = 0;
    const double gms = median_ms(
        [&] {
            return cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, a.get(), CUDA_R_16BF,
                                m, b.get(), CUDA_R_16BF, m, &zero, c.get(), CUDA_R_16BF, m,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
                       ? cudaSuccess
                       : cudaErrorUnknown;
        },
        10);
    ceil.gemm_tflops = 2.0 * m * m * m / gms / 1e9;
    std::printf(
        "measured ceilings: copy %.0f GB/s (read + write), cuBLAS bf16 GEMM %.0f "
        "TFLOP/s\n",
        ceil.copy_gbs, ceil.gemm_tflops);
}

}  // namespace deltatune::bench
#endif  // DELTATUNE_HAVE_CUDA
