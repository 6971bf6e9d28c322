// What the kernel benchmarks (kernels_bench) share: random-filled device buffers and the median
// of CUDA-event timings.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "tests/kernels/cuda_test_util.h"

namespace deltatune::bench {

using Bf16Fill = cudatest::DeviceBuffer<uint16_t>::RandomFill;
using F32Fill = cudatest::DeviceBuffer<float>::RandomFill;

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median milliseconds of `reps` timed calls of f() on the default stream, after `warmup`
// untimed ones (first-call costs: plan builds, lazy module loading).
inline double median_ms(const std::function<cudaError_t()>& f, int reps, int warmup = 2) {
    for (int i = 0; i < warmup; ++i) REQUIRE(f() == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<double> ms;
    cudaEvent_t a, b;
    REQUIRE(cudaEventCreate(&a) == cudaSuccess);
    REQUIRE(cudaEventCreate(&b) == cudaSuccess);
    for (int i = 0; i < reps; ++i) {
        REQUIRE(cudaEventRecord(a) == cudaSuccess);
        REQUIRE(f() == cudaSuccess);
        REQUIRE(cudaEventRecord(b) == cudaSuccess);
        REQUIRE(cudaEventSynchronize(b) == cudaSuccess);
        float t = 0;
        REQUIRE(cudaEventElapsedTime(&t, a, b) == cudaSuccess);
        ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(std::move(ms));
}

}  // namespace deltatune::bench
#endif  // DELTATUNE_HAVE_CUDA
