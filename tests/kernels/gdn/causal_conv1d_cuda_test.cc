// Varlen causal conv1d + SiLU CUDA kernels against the fp64 reference on bf16 inputs ([cuda];
// skipped with a printed reason where no GPU is present): documents of 1, 3, 63, 64, 65 and
// 1000+ tokens packed together, so windows that would cross a document start are exercised.
#include <catch2/catch.hpp>

#include "kernels/gdn/causal_conv1d.h"
#include "tests/kernels/common/cuda_test_util.h"
#include "tests/kernels/common/fp64_ref_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

std::vector<double> to_double(const std::vector<float>& f) {
    return {f.begin(), f.end()};
}
std::vector<float> to_single(const std::vector<double>& d) {
    return {d.begin(), d.end()};
}

TEST_CASE("causal conv1d CUDA forward and backward match the fp64 reference", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(61);
    const std::vector<std::vector<int32_t>> layouts = {
        {1, 63, 64, 65, 1, 3, 1031, 2, 64},  // many documents, one past 1000 tokens
        {200},
        {5, 1, 1, 7},
    };
    for (const auto& lengths : layouts) {
        for (int64_t channels : {96, 300, 101}) {  // 101: one channel per thread
            for (int64_t kernel : {4, 2}) {
                INFO("docs = " << lengths.size() << ", channels = " << channels
                               << ", kernel = " << kernel);
                const auto cu = awkward_cu_seqlens(lengths);
                const int64_t docs = static_cast<int64_t>(lengths.size());
                const int64_t tokens = cu.back();
                const size_t n = static_cast<size_t>(tokens * channels);
                const Bf16Data x = random_bf16(n, rng);
                const Bf16Data w = random_bf16(static_cast<size_t>(channels * kernel), rng, 0.5f);
                const Bf16Data dy = random_bf16(n, rng);
                const auto xd = to_double(x.f), wd = to_double(w.f), dyd = to_double(dy.f);
                std::vector<double> y_ref(n), dx_ref(n);
                const std::vector<float> dw0 =
                    random_f32(static_cast<size_t>(channels * kernel), rng);
                std::vector<double> dw_ref = to_double(dw0);
                causal_conv1d_forward_ref(y_ref.data(), xd.data(), wd.data(), cu.data(), docs,
                                          channels, kernel);
                causal_conv1d_backward_ref(dx_ref.data(), dw_ref.data(), dyd.data(), xd.data(),
                                           wd.data(), cu.data(), docs, channels, kernel);

                DeviceBuffer<int32_t> d_cu(cu);
                DeviceBuffer<uint16_t> d_x(x.bits), d_w(w.bits), d_dy(dy.bits), d_y(n), d_dx(n);
                DeviceBuffer<float> d_dw(dw0);
                const size_t wsb = causal_conv1d_backward_workspace_bytes(tokens, channels, kernel);
                DeviceBuffer<char> ws(wsb);
                d_y.poison();
                d_dx.poison();
                ws.poison();
                REQUIRE(causal_conv1d_forward(bf16_ptr(d_y), bf16_ptr(d_x), bf16_ptr(d_w),
                                              d_cu.get(), docs, tokens, channels, kernel,
                                              nullptr) == cudaSuccess);
                REQUIRE(causal_conv1d_backward(bf16_ptr(d_dx), d_dw.get(), bf16_ptr(d_dy),
                                               bf16_ptr(d_x), bf16_ptr(d_w), d_cu.get(), docs,
                                               tokens, channels, kernel, ws.get(), wsb,
                                               nullptr) == cudaSuccess);
                const auto y = to_float(d_y.download());
                const auto dx = to_float(d_dx.download());
                const auto dw = d_dw.download();
                CHECK(noted("conv1d y rel", rel_err(y, to_single(y_ref))) < 1e-2);
                CHECK(noted("conv1d y max_scaled",
                            max_scaled_err(y, to_single(y_ref), 1e-2, 1e-2)) <= 1.0);
                CHECK(noted("conv1d dx rel", rel_err(dx, to_single(dx_ref))) < 1e-2);
                CHECK(noted("conv1d dw rel", rel_err(dw, to_single(dw_ref))) < 1e-4);
                // The document-start rule: a first token sees only itself.
                for (size_t d = 0; d < lengths.size(); ++d) {
                    const size_t t = static_cast<size_t>(cu[d]);
                    for (int64_t c = 0; c < channels; c += 37) {
                        const double pre = wd[static_cast<size_t>(c * kernel + kernel - 1)] *
                                           xd[t * static_cast<size_t>(channels) + c];
                        const double expect = pre / (1 + std::exp(-pre));
                        CHECK(std::abs(y[t * channels + c] - expect) <=
                              1e-2 * (1 + std::abs(expect)));
                    }
                }
            }
        }
    }
}
#endif

}  // namespace
}  // namespace deltatune
