// runtime/optim/cpu_update.h: clipping as torch.nn.utils.clip_grad_norm_ (only above the
// threshold, scale max / (norm + 1e-6)) and AdamW per piece as the kernels' reference applies it.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "runtime/optim/cpu_update.h"

namespace deltatune {
namespace {

TEST_CASE("grad_clip scales only above a positive threshold", "[optim]") {
    CHECK_FALSE(grad_clip(3.0, 0.0).active);  // 0: no clipping
    CHECK_FALSE(grad_clip(0.5, 1.0).active);  // under the threshold
    CHECK_FALSE(grad_clip(1.0, 1.0).active);  // at it
    const GradClip c = grad_clip(4.0, 1.0);
    CHECK(c.active);
    CHECK(c.scale == static_cast<float>(1.0 / (4.0 + 1e-6)));
}

TEST_CASE("clip_and_adamw equals clipping then the AdamW reference, piece by piece", "[optim]") {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.f, 1.f);
    const int64_t sizes[3] = {5, 1, 17};
    std::vector<std::vector<float>> p(3), g(3), m(3), v(3);
    for (int k = 0; k < 3; ++k) {
        for (auto* x : {&p[k], &g[k], &m[k], &v[k]}) {
            x->resize(static_cast<size_t>(sizes[k]));
            for (float& f : *x) f = normal(rng);
        }
        for (float& f : v[k]) f = f * f;  // second moments are non-negative
    }
    auto expect_p = p, expect_m = m, expect_v = v, expect_g = g;
    AdamWHyper h;
    h.lr = 1e-3, h.weight_decay = 0.1;
    const GradClip clip = grad_clip(10.0, 2.0);
    std::vector<CpuUpdatePiece> pieces;
    for (int k = 0; k < 3; ++k) {
        pieces.push_back({p[k].data(), g[k].data(), m[k].data(), v[k].data(), sizes[k]});
        for (float& f : expect_g[k]) f *= clip.scale;
        adamw_step_ref(expect_p[k].data(), expect_m[k].data(), expect_v[k].data(),
                       expect_g[k].data(), sizes[k], h, 3);
    }
    clip_and_adamw(pieces, clip, h, 3);
    for (int k = 0; k < 3; ++k) {
        CHECK(p[k] == expect_p[k]);
        CHECK(m[k] == expect_m[k]);
        CHECK(v[k] == expect_v[k]);
        CHECK(g[k] == expect_g[k]);  // the gradient is clipped in place
    }
}

}  // namespace
}  // namespace deltatune
