// Gated RMSNorm CUDA kernels against the fp64 reference on bf16 inputs ([cuda]; skipped with a
// printed reason where no GPU is present).
#include <catch2/catch.hpp>

#include "kernels/norm/gated_rmsnorm.h"
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

TEST_CASE("gated rmsnorm CUDA forward and backward match the fp64 reference", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(62);
    const float eps = 1e-6f;
    for (int64_t cols : {128, 100, 7}) {
        for (int64_t rows : {1, 65, 3001}) {
            INFO("rows = " << rows << ", cols = " << cols);
            const size_t n = static_cast<size_t>(rows * cols);
            const Bf16Data x = random_bf16(n, rng, 2.0f);
            const Bf16Data z = random_bf16(n, rng, 2.0f);
            const Bf16Data w = random_bf16(static_cast<size_t>(cols), rng, 1.0f);
            const Bf16Data dy = random_bf16(n, rng);
            const std::vector<float> dw0 = random_f32(static_cast<size_t>(cols), rng);
            const auto xd = to_double(x.f), zd = to_double(z.f), wd = to_double(w.f),
                       dyd = to_double(dy.f);
            std::vector<double> y_ref(n), rstd_ref(static_cast<size_t>(rows)), dx_ref(n), dz_ref(n);
            std::vector<double> dw_ref = to_double(dw0);
            gated_rmsnorm_forward_ref(y_ref.data(), rstd_ref.data(), xd.data(), zd.data(),
                                      wd.data(), rows, cols, static_cast<double>(eps));
            gated_rmsnorm_backward_ref(dx_ref.data(), dz_ref.data(), dw_ref.data(), dyd.data(),
                                       xd.data(), zd.data(), wd.data(), rstd_ref.data(), rows,
                                       cols);

            DeviceBuffer<uint16_t> d_x(x.bits), d_z(z.bits), d_w(w.bits), d_dy(dy.bits), d_y(n),
                d_dx(n), d_dz(n);
            DeviceBuffer<float> d_rstd(static_cast<size_t>(rows)), d_dw(dw0);
            const size_t wsb = gated_rmsnorm_backward_workspace_bytes(rows, cols);
            DeviceBuffer<char> ws(wsb);
            d_y.poison();
            d_rstd.poison();
            d_dx.poison();
            d_dz.poison();
            ws.poison();
            REQUIRE(gated_rmsnorm_forward(bf16_ptr(d_y), d_rstd.get(), bf16_ptr(d_x), bf16_ptr(d_z),
                                          bf16_ptr(d_w), rows, cols, eps, nullptr) == cudaSuccess);
            REQUIRE(gated_rmsnorm_backward(bf16_ptr(d_dx), bf16_ptr(d_dz), d_dw.get(),
                                           bf16_ptr(d_dy), bf16_ptr(d_x), bf16_ptr(d_z),
                                           bf16_ptr(d_w), d_rstd.get(), rows, cols, ws.get(), wsb,
                                           nullptr) == cudaSuccess);
            const auto y = to_float(d_y.download());
            CHECK(noted("gated_rmsnorm y rel", rel_err(y, to_single(y_ref))) < 1e-2);
            CHECK(noted("gated_rmsnorm y max_scaled",
                        max_scaled_err(y, to_single(y_ref), 1e-2, 1e-2)) <= 1.0);
            CHECK(noted("gated_rmsnorm rstd rel", rel_err(d_rstd.download(), to_single(rstd_ref))) <
                  1e-5);
            CHECK(noted("gated_rmsnorm dx rel",
                        rel_err(to_float(d_dx.download()), to_single(dx_ref))) < 1e-2);
            CHECK(noted("gated_rmsnorm dz rel",
                        rel_err(to_float(d_dz.download()), to_single(dz_ref))) < 1e-2);
            CHECK(noted("gated_rmsnorm dw rel", rel_err(d_dw.download(), to_single(dw_ref))) <
                  1e-4);
        }
    }
}
#endif

}  // namespace
}  // namespace deltatune
