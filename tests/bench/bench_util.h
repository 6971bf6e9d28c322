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

#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune::bench {

using Bf16Fill = cudatest::DeviceBuffer<uint16_t>::RandomFill;
using F32Fill = cudatest::DeviceBuffer<float>::RandomFill;

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median milliseconds of `reps` timed calls of f() on the default stream, after `warmup`
// untimed ones (first-call costs: plan builds, lazy module loading). The calls are queued back to
// back with an event between each two, as a training step queues its kernels, so that each time
// is the GPU's alone: an event pair around one call on an idle GPU also counts the host's launch
// (several us, 5-10% of the shortest kernels here), which a step's queue hides.
inline double median_ms(const std::function<cudaError_t()>& f, int reps, int warmup = 2) {
    for (int i = 0; i < warmup; ++i) REQUIRE(f() == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<cudaEvent_t> ev(static_cast<size_t>(reps) + 1);
    for (auto& e : ev) REQUIRE(cudaEventCreate(&e) == cudaSuccess);
    REQUIRE(f() == cudaSuccess);  // untimed: the GPU is busy while the timed calls are queued
    REQUIRE(cudaEventRecord(ev[0]) == cudaSuccess);
    for (int i = 0; i < reps; ++i) {
        REQUIRE(f() == cudaSuccess);
        REQUIRE(cudaEventRecord(ev[static_cast<size_t>(i) + 1]) == cudaSuccess);
    }
    REQUIRE(cudaEventSynchronize(ev.back()) == cudaSuccess);
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
        float t = 0;
        REQUIRE(cudaEventElapsedTime(&t, ev[static_cast<size_t>(i)],
                                     ev[static_cast<size_t>(i) + 1]) == cudaSuccess);
        ms.push_back(t);
    }
    for (auto& e : ev) cudaEventDestroy(e);
    return median(std::move(ms));
}

}  // namespace deltatune::bench
#endif  // DELTATUNE_HAVE_CUDA
