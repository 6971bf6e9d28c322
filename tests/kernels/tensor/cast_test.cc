// fp32 <-> bf16 casts: the reference against the runtime-independent bit rules, and the CUDA
// kernels against the reference on fresh random inputs with poisoned outputs ([cuda]: skipped
// with a printed reason where no GPU is present).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/tensor/cast.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune {
namespace {

[[maybe_unused]] std::vector<float> awkward_inputs(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> x(n);
    for (auto& v : x) v = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    // Specials and rounding ties mixed in.
    const float specials[] = {0.0f,
                              -0.0f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::denorm_min(),
                              1.00390625f,
                              1.01171875f};
    for (size_t i = 0; i < std::size(specials) && i * 7 < n; ++i) x[i * 7] = specials[i];
    return x;
}

TEST_CASE("cast reference: ties to even, NaN kept, round trip exact", "[kernels]") {
    const std::vector<float> x = {1.00390625f, 1.01171875f, -2.5f,
                                  std::numeric_limits<float>::quiet_NaN()};
    std::vector<uint16_t> h(x.size());
    cast_f32_to_bf16_ref(h.data(), x.data(), static_cast<int64_t>(x.size()));
    CHECK(h[0] == 0x3f80);
    CHECK(h[1] == 0x3f82);
    CHECK(h[2] == 0xc020);
    std::vector<float> back(x.size());
    cast_bf16_to_f32_ref(back.data(), h.data(), static_cast<int64_t>(h.size()));
    CHECK(back[2] == -2.5f);
    CHECK(std::isnan(back[3]));
}

#if DELTATUNE_HAVE_CUDA
bool have_gpu() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        WARN("skipped: no CUDA device present");
        return false;
    }
    return true;
}

TEST_CASE("cast kernels match the reference on random inputs of awkward sizes", "[kernels][cuda]") {
    if (!have_gpu()) return;
    for (int64_t n : {1, 3, 7, 1000, 4099, 1 << 20}) {
        for (int offset : {0, 1}) {  // offset 1: unaligned pointers take the scalar path
            INFO("n = " << n << ", offset = " << offset);
            const auto x =
                awkward_inputs(static_cast<size_t>(n), static_cast<uint32_t>(n + offset));
            std::vector<uint16_t> ref(static_cast<size_t>(n));
            cast_f32_to_bf16_ref(ref.data(), x.data(), n);
            float* dx = nullptr;
            __nv_bfloat16* dh = nullptr;
            float* dback = nullptr;
            REQUIRE(cudaMalloc(&dx, (n + 1) * sizeof(float)) == cudaSuccess);
            REQUIRE(cudaMalloc(&dh, (n + 1) * sizeof(__nv_bfloat16)) == cudaSuccess);
            REQUIRE(cudaMalloc(&dback, (n + 1) * sizeof(float)) == cudaSuccess);
            REQUIRE(cudaMemcpy(dx + offset, x.data(), n * sizeof(float), cudaMemcpyHostToDevice) ==
                    cudaSuccess);
            REQUIRE(cudaMemset(dh, 0xff, (n + 1) * sizeof(__nv_bfloat16)) ==
                    cudaSuccess);  // poison
            REQUIRE(cast_f32_to_bf16(dh + offset, dx + offset, n, nullptr) == cudaSuccess);
            REQUIRE(cast_bf16_to_f32(dback + offset, dh + offset, n, nullptr) == cudaSuccess);
            std::vector<uint16_t> got(static_cast<size_t>(n));
            std::vector<float> back(static_cast<size_t>(n));
            REQUIRE(cudaMemcpy(got.data(), dh + offset, n * sizeof(uint16_t),
                               cudaMemcpyDeviceToHost) == cudaSuccess);
            REQUIRE(cudaMemcpy(back.data(), dback + offset, n * sizeof(float),
                               cudaMemcpyDeviceToHost) == cudaSuccess);
            int64_t mismatches = 0;
            for (int64_t i = 0; i < n; ++i) {
                if (std::isnan(x[i])) {
                    mismatches += !std::isnan(back[i]);
                } else {
                    mismatches += got[i] != ref[i];
                    float r = 0;
                    cast_bf16_to_f32_ref(&r, &ref[i], 1);
                    mismatches += !(back[i] == r);
                }
            }
            CHECK(mismatches == 0);
            cudaFree(dx);
            cudaFree(dh);
            cudaFree(dback);
        }
    }
}
#else
TEST_CASE("cast kernels match the reference on random inputs of awkward sizes", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
