// SwiGLU CUDA kernels against the fp32 reference on bf16 inputs, aligned (16-byte path) and
// misaligned (scalar path) ([cuda]; skipped with a printed reason where no GPU is present).
#include <catch2/catch.hpp>

#include "kernels/mlp/swiglu.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

TEST_CASE("swiglu CUDA forward and backward match the reference", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(31);
    for (int64_t n : {1, 7, 4099, 1 << 20}) {
        for (int offset : {0, 1}) {
            INFO("n = " << n << ", offset = " << offset);
            const size_t m = static_cast<size_t>(n + offset);
            const Bf16Data gate = random_bf16(m, rng, 3.0f);
            const Bf16Data up = random_bf16(m, rng);
            const Bf16Data dh = random_bf16(m, rng);
            std::vector<float> h_ref(m), dg_ref(m), du_ref(m);
            swiglu_forward_ref(h_ref.data(), gate.f.data(), up.f.data(), static_cast<int64_t>(m));
            swiglu_backward_ref(dg_ref.data(), du_ref.data(), dh.f.data(), gate.f.data(),
                                up.f.data(), static_cast<int64_t>(m));
            DeviceBuffer<uint16_t> d_g(gate.bits), d_u(up.bits), d_dh(dh.bits);
            DeviceBuffer<uint16_t> d_h(m), d_dg(m), d_du(m);
            d_h.poison();
            d_dg.poison();
            d_du.poison();
            REQUIRE(swiglu_forward(bf16_ptr(d_h) + offset, bf16_ptr(d_g) + offset,
                                   bf16_ptr(d_u) + offset, n, nullptr) == cudaSuccess);
            REQUIRE(swiglu_backward(bf16_ptr(d_dg) + offset, bf16_ptr(d_du) + offset,
                                    bf16_ptr(d_dh) + offset, bf16_ptr(d_g) + offset,
                                    bf16_ptr(d_u) + offset, n, nullptr) == cudaSuccess);
            auto tail = [offset](std::vector<float> v) {
                return std::vector<float>(v.begin() + offset, v.end());
            };
            const auto h = tail(to_float(d_h.download()));
            const auto dg = tail(to_float(d_dg.download()));
            const auto du = tail(to_float(d_du.download()));
            CHECK(noted("swiglu h max_scaled", max_scaled_err(h, tail(h_ref), 1e-3, 8e-3)) <= 1.0);
            CHECK(noted("swiglu dg max_scaled", max_scaled_err(dg, tail(dg_ref), 1e-3, 8e-3)) <=
                  1.0);
            CHECK(noted("swiglu du max_scaled", max_scaled_err(du, tail(du_ref), 1e-3, 8e-3)) <=
                  1.0);
        }
    }
}
#else
TEST_CASE("swiglu CUDA forward and backward match the reference", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
