// Fused linear cross-entropy against linear_forward_ref + cross_entropy_*_ref +
// linear_backward_ref on the same bf16 inputs, chunked and unchunked, with ignored rows, dW
// accumulated into or (fresh) written over poison ([cuda]; skipped where no GPU is present).
#include <catch2/catch.hpp>

#include "kernels/loss/cross_entropy.h"
#include "kernels/loss/fused_linear_cross_entropy.h"
#include "kernels/mlp/linear.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

TEST_CASE("fused linear cross-entropy CUDA matches the reference", "[kernels][cuda]") {
    if (!have_gpu()) return;
    cublasHandle_t blas = nullptr;
    REQUIRE(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
    std::mt19937 rng(71);
    struct Case {
        int64_t tokens, hidden, vocab, chunk;
        double ignore_fraction;
        bool dw_fresh = false;  // dW starts as poison and must be written, not added to
    };
    const Case cases[] = {{1, 64, 1000, 1024, 0.0},
                          {257, 64, 1000, 64, 0.2},
                          {257, 136, 1003, 100, 0.3},
                          {300, 128, 4096, 1024, 0.1},
                          {33, 64, 1000, 8, 1.0},
                          {257, 136, 1003, 100, 0.3, true},
                          {300, 128, 4096, 1024, 0.1, true},
                          {0, 64, 1000, 64, 0.0, true}};
    for (const Case& c : cases) {
        INFO("tokens = " << c.tokens << ", hidden = " << c.hidden << ", vocab = " << c.vocab
                         << ", chunk = " << c.chunk << ", ignored = " << c.ignore_fraction
                         << ", fresh dW = " << c.dw_fresh);
        const Bf16Data x = random_bf16(static_cast<size_t>(c.tokens * c.hidden), rng);
        const Bf16Data w = random_bf16(static_cast<size_t>(c.vocab * c.hidden), rng, 0.1f);
        std::vector<int32_t> targets(static_cast<size_t>(c.tokens));
        std::uniform_real_distribution<double> u(0, 1);
        int64_t counted = 0;
        for (auto& t : targets) {
            t = u(rng) < c.ignore_fraction ? kIgnoreIndex : static_cast<int32_t>(rng() % c.vocab);
            counted += t != kIgnoreIndex;
        }
        const float grad_scale = 1.0f / static_cast<float>(counted > 0 ? counted : 1);
        // Reference.
        std::vector<float> logits(static_cast<size_t>(c.tokens * c.vocab));
        linear_forward_ref(logits.data(), x.f.data(), w.f.data(), c.tokens, c.hidden, c.vocab);
        std::vector<float> loss_ref(static_cast<size_t>(c.tokens)), lse_ref(loss_ref.size());
        cross_entropy_forward_ref(loss_ref.data(), lse_ref.data(), logits.data(), targets.data(),
                                  c.tokens, c.vocab);
        std::vector<float> dlogits(logits.size());
        cross_entropy_backward_ref(dlogits.data(), logits.data(), lse_ref.data(), targets.data(),
                                   c.tokens, c.vocab, grad_scale);
        const std::vector<float> dw0 =
            c.dw_fresh ? std::vector<float>(static_cast<size_t>(c.vocab * c.hidden), 0.0f)
                       : random_f32(static_cast<size_t>(c.vocab * c.hidden), rng, 1e-3f);
        std::vector<float> dx_ref(x.f.size()), dw_ref = dw0;
        linear_backward_ref(dx_ref.data(), dw_ref.data(), dlogits.data(), x.f.data(), w.f.data(),
                            c.tokens, c.hidden, c.vocab);
        double total_ref = 0;
        for (float l : loss_ref) total_ref += l;
        total_ref *= grad_scale;

        DeviceBuffer<uint16_t> d_x(x.bits), d_w(w.bits), d_dx(x.bits.size());
        DeviceBuffer<int32_t> d_t(targets);
        DeviceBuffer<float> d_loss(1), d_rows(loss_ref.size()), d_lse(lse_ref.size()), d_dw(dw0);
        d_dx.poison();
        d_loss.poison();
        d_rows.poison();
        d_lse.poison();
        if (c.dw_fresh) d_dw.poison();
        FusedLinearCrossEntropyArgs a;
        a.loss = d_loss.get();
        a.row_losses = d_rows.get();
        a.lse = d_lse.get();
        a.dx = bf16_ptr(d_dx);
        a.dw = d_dw.get();
        a.dw_fresh = c.dw_fresh;
        a.x = bf16_ptr(d_x);
        a.w = bf16_ptr(d_w);
        a.targets = d_t.get();
        a.tokens = c.tokens;
        a.hidden = c.hidden;
        a.vocab = c.vocab;
        a.grad_scale = grad_scale;
        a.chunk_tokens = c.chunk;
        REQUIRE(fused_linear_cross_entropy_supported(a));
        const size_t ws_bytes = fused_linear_cross_entropy_workspace_bytes(a);
        DeviceBuffer<char> ws(ws_bytes);
        ws.poison();
        REQUIRE(fused_linear_cross_entropy(a, blas, ws.get(), ws_bytes, nullptr) == cudaSuccess);
        // Logits are bf16 (as transformers forms them), so the loss carries their rounding.
        CHECK(noted("fused_ce row_losses max_scaled",
                    max_scaled_err(d_rows.download(), loss_ref, 2e-2, 1e-2)) <= 1.0);
        CHECK(noted("fused_ce lse max_scaled",
                    max_scaled_err(d_lse.download(), lse_ref, 2e-2, 1e-2)) <= 1.0);
        const float total = d_loss.download()[0];
        CHECK(std::abs(total - total_ref) <= 1e-2 * std::abs(total_ref) + 1e-3);
        const auto dx = to_float(d_dx.download());
        if (counted > 0) {
            CHECK(noted("fused_ce dx rel", rel_err(dx, dx_ref)) < 2e-2);
        } else {
            int64_t nonzero = 0;  // nothing counted: dx must be written, and exactly zero
            for (float v : dx) nonzero += !(v == 0.0f);
            CHECK(nonzero == 0);
        }
        if (c.tokens > 0) {
            CHECK(noted("fused_ce dw rel", rel_err(d_dw.download(), dw_ref)) < 2e-2);
        } else {
            CHECK(d_dw.download() == dw_ref);  // no token: a fresh dW is exactly zero
        }
    }
    cublasDestroy(blas);
}
#else
TEST_CASE("fused linear cross-entropy CUDA matches the reference", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
