// Fused q/k RMSNorm + partial RoPE CUDA kernels against rmsnorm_*_ref followed by rope_*_ref
// ([cuda]; skipped with a printed reason where no GPU is present). q is read out of q_proj's
// interleaved (tokens, heads, 2 * head_dim) layout, and the gate half must stay untouched.
#include <catch2/catch.hpp>

#include "kernels/attention/qk_norm_rope.h"
#include "kernels/attention/rope.h"
#include "kernels/norm/rmsnorm.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

struct Shape {
    int64_t heads, head_dim, rotary_dim;
    bool interleaved;  // read with q_proj's (2 * head_dim) head stride
    int offset;        // element offset of x (1: the scalar path)
};

TEST_CASE("q/k norm + RoPE CUDA forward and backward match the references", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(41);
    const double theta = 1e7;
    const float eps = 1e-6f;
    const std::vector<std::vector<int32_t>> docs = {{1}, {1, 1, 1, 5}, {300}, {3, 1, 77, 1, 2000}};
    const Shape shapes[] = {{3, 256, 64, true, 0},
                            {2, 256, 64, false, 0},
                            {5, 128, 32, false, 0},
                            {2, 72, 24, true, 1}};
    for (const auto& lengths : docs) {
        for (const Shape& sh : shapes) {
            const auto cu = awkward_cu_seqlens(lengths);
            const auto pos = positions_from_cu(cu);
            const int64_t tokens = cu.back();
            const int64_t d = sh.head_dim;
            const int64_t head_stride = sh.interleaved ? 2 * d : d;
            const int64_t token_stride = sh.heads * head_stride;
            INFO("tokens = " << tokens << ", heads = " << sh.heads << ", head_dim = " << d
                             << ", interleaved = " << sh.interleaved << ", offset = " << sh.offset);
            const size_t xn = static_cast<size_t>(tokens * token_stride + sh.offset);
            const size_t rows = static_cast<size_t>(tokens * sh.heads);
            const Bf16Data x = random_bf16(xn, rng, 1.5f);
            const Bf16Data w = random_bf16(static_cast<size_t>(d), rng, 0.2f);
            // Reference: contiguous rows, norm, then RoPE.
            std::vector<float> xr(rows * static_cast<size_t>(d));
            for (int64_t t = 0; t < tokens; ++t) {
                for (int64_t h = 0; h < sh.heads; ++h) {
                    for (int64_t c = 0; c < d; ++c) {
                        xr[static_cast<size_t>((t * sh.heads + h) * d + c)] =
                            x.f[static_cast<size_t>(sh.offset + t * token_stride + h * head_stride +
                                                    c)];
                    }
                }
            }
            std::vector<float> y_ref(xr.size()), rstd_ref(rows);
            rmsnorm_forward_ref(y_ref.data(), rstd_ref.data(), xr.data(), w.f.data(),
                                static_cast<int64_t>(rows), d, eps);
            rope_forward_ref(y_ref.data(), pos.data(), tokens, sh.heads, d, sh.rotary_dim, theta);

            DeviceBuffer<uint16_t> d_x(x.bits), d_w(w.bits), d_out(xr.size());
            DeviceBuffer<int32_t> d_pos(pos);
            DeviceBuffer<float> d_rstd(rows);
            d_out.poison();
            d_rstd.poison();
            REQUIRE(qk_norm_rope_forward(bf16_ptr(d_out), d_rstd.get(), bf16_ptr(d_x) + sh.offset,
                                         token_stride, head_stride, bf16_ptr(d_w), d_pos.get(),
                                         tokens, sh.heads, d, sh.rotary_dim, theta, eps,
                                         nullptr) == cudaSuccess);
            const auto y = to_float(d_out.download());
            CHECK(noted("qk_norm_rope y rel", rel_err(y, y_ref)) < 1e-2);
            CHECK(noted("qk_norm_rope y max_scaled", max_scaled_err(y, y_ref, 2e-2, 1e-2)) <= 1.0);
            CHECK(noted("qk_norm_rope rstd rel", rel_err(d_rstd.download(), rstd_ref)) < 1e-5);

            // Backward: R^T then the norm's backward.
            const Bf16Data dy = random_bf16(xr.size(), rng);
            std::vector<float> g = dy.f;
            rope_backward_ref(g.data(), pos.data(), tokens, sh.heads, d, sh.rotary_dim, theta);
            const std::vector<float> dw0 = random_f32(static_cast<size_t>(d), rng);
            std::vector<float> dx_ref(xr.size()), dw_ref = dw0;
            rmsnorm_backward_ref(dx_ref.data(), dw_ref.data(), g.data(), xr.data(), w.f.data(),
                                 rstd_ref.data(), static_cast<int64_t>(rows), d);
            DeviceBuffer<uint16_t> d_dy(dy.bits), d_dx(xn);
            DeviceBuffer<float> d_dw(dw0), d_rstd_in(rstd_ref);
            const size_t ws_bytes = qk_norm_rope_backward_workspace_bytes(tokens, sh.heads, d);
            DeviceBuffer<char> ws(ws_bytes);
            ws.poison();
            d_dx.poison();
            REQUIRE(qk_norm_rope_backward(bf16_ptr(d_dx) + sh.offset, d_dw.get(), bf16_ptr(d_dy),
                                          bf16_ptr(d_x) + sh.offset, token_stride, head_stride,
                                          bf16_ptr(d_w), d_rstd_in.get(), d_pos.get(), tokens,
                                          sh.heads, d, sh.rotary_dim, theta, ws.get(), ws_bytes,
                                          nullptr) == cudaSuccess);
            const auto dx_all = d_dx.download();
            std::vector<float> dx(xr.size());
            int64_t gate_written = 0;
            for (int64_t t = 0; t < tokens; ++t) {
                for (int64_t h = 0; h < sh.heads; ++h) {
                    const size_t base =
                        static_cast<size_t>(sh.offset + t * token_stride + h * head_stride);
                    for (int64_t c = 0; c < d; ++c) {
                        dx[static_cast<size_t>((t * sh.heads + h) * d + c)] =
                            bf16_bits_to_float(dx_all[base + static_cast<size_t>(c)]);
                        if (sh.interleaved) {
                            gate_written += dx_all[base + static_cast<size_t>(d + c)] != 0xffff;
                        }
                    }
                }
            }
            CHECK(gate_written == 0);
            CHECK(noted("qk_norm_rope dx rel", rel_err(dx, dx_ref)) < 1e-2);
            CHECK(noted("qk_norm_rope dx max_scaled", max_scaled_err(dx, dx_ref, 2e-2, 2e-2)) <=
                  1.0);
            CHECK(noted("qk_norm_rope dw rel", rel_err(d_dw.download(), dw_ref)) < 1e-4);
        }
    }
}
#else
TEST_CASE("q/k norm + RoPE CUDA forward and backward match the references", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
