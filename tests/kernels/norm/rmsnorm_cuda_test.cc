// Fused residual-add + zero-centred RMSNorm CUDA kernels against the fp32 reference on bf16
// inputs ([cuda]; skipped with a printed reason where no GPU is present).
#include <catch2/catch.hpp>

#include "kernels/norm/rmsnorm.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

TEST_CASE("rmsnorm+residual CUDA forward and backward match the reference", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(21);
    const float eps = 1e-6f;
    // Columns: 16-byte and scalar (1003) paths, up to twice the 27B hidden size; rows giving 1,
    // 19 and 38 blocks of backward partials (the second pass sums parts in 32 strided lanes).
    for (int64_t cols : {8, 1000, 1003, 5120, 10240}) {
        for (int64_t rows : {1, 7, 300, 600}) {
            for (bool with_residual : {true, false}) {
                INFO("rows = " << rows << ", cols = " << cols << ", residual = " << with_residual);
                const size_t n = static_cast<size_t>(rows * cols);
                const Bf16Data x = random_bf16(n, rng, 2.0f);
                const Bf16Data res = random_bf16(n, rng, 1.0f);
                const Bf16Data w = random_bf16(static_cast<size_t>(cols), rng, 0.2f);
                // s = bf16(x + residual), as the kernel forms it.
                std::vector<uint16_t> s_bits = x.bits;
                if (with_residual) {
                    for (size_t i = 0; i < n; ++i)
                        s_bits[i] = float_to_bf16_bits(x.f[i] + res.f[i]);
                }
                const std::vector<float> s = to_float(s_bits);
                std::vector<float> y_ref(n), rstd_ref(static_cast<size_t>(rows));
                rmsnorm_forward_ref(y_ref.data(), rstd_ref.data(), s.data(), w.f.data(), rows, cols,
                                    eps);

                DeviceBuffer<uint16_t> d_x(x.bits), d_res(res.bits), d_w(w.bits);
                DeviceBuffer<uint16_t> d_y(n), d_s(n);
                DeviceBuffer<float> d_rstd(static_cast<size_t>(rows));
                d_y.poison();
                d_s.poison();
                d_rstd.poison();
                REQUIRE(rmsnorm_residual_forward(
                            bf16_ptr(d_y), bf16_ptr(d_s), d_rstd.get(), bf16_ptr(d_x),
                            with_residual ? bf16_ptr(d_res) : nullptr, bf16_ptr(d_w), rows, cols,
                            eps, nullptr) == cudaSuccess);
                const auto y = to_float(d_y.download());
                CHECK(noted("rmsnorm y rel", rel_err(y, y_ref)) < 1e-2);
                CHECK(noted("rmsnorm y max_scaled", max_scaled_err(y, y_ref, 1e-2, 1e-2)) <= 1.0);
                CHECK(noted("rmsnorm rstd rel", rel_err(d_rstd.download(), rstd_ref)) < 1e-5);
                if (with_residual) CHECK(d_s.download() == s_bits);

                // Backward through the norm plus the gradient arriving on the residual stream.
                const Bf16Data dy = random_bf16(n, rng);
                const Bf16Data dres = random_bf16(n, rng, 0.5f);
                const std::vector<float> dw0 = random_f32(static_cast<size_t>(cols), rng);
                std::vector<float> ds_ref(n), dw_ref = dw0;
                rmsnorm_backward_ref(ds_ref.data(), dw_ref.data(), dy.f.data(), s.data(),
                                     w.f.data(), rstd_ref.data(), rows, cols);
                for (size_t i = 0; i < n; ++i) ds_ref[i] += dres.f[i];
                DeviceBuffer<uint16_t> d_dy(dy.bits), d_dres(dres.bits), d_sin(s_bits), d_ds(n);
                DeviceBuffer<float> d_dw(dw0), d_rstd_in(rstd_ref);
                const size_t ws_bytes = rmsnorm_backward_workspace_bytes(rows, cols);
                DeviceBuffer<char> ws(ws_bytes);
                ws.poison();
                d_ds.poison();
                REQUIRE(rmsnorm_residual_backward(bf16_ptr(d_ds), d_dw.get(), bf16_ptr(d_dy),
                                                  bf16_ptr(d_dres), bf16_ptr(d_sin), bf16_ptr(d_w),
                                                  d_rstd_in.get(), rows, cols, ws.get(), ws_bytes,
                                                  nullptr) == cudaSuccess);
                const auto ds = to_float(d_ds.download());
                CHECK(noted("rmsnorm ds rel", rel_err(ds, ds_ref)) < 1e-2);
                CHECK(noted("rmsnorm ds max_scaled", max_scaled_err(ds, ds_ref, 2e-2, 2e-2)) <=
                      1.0);
                CHECK(noted("rmsnorm dw rel", rel_err(d_dw.download(), dw_ref)) < 1e-4);
            }
        }
    }
}
#else
TEST_CASE("rmsnorm+residual CUDA forward and backward match the reference", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
