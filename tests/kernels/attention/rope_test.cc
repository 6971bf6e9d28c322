// Tests of the partial rotate-half RoPE reference: direct rotation formula, untouched channels,
// relative-position property, transformers' fp32 recipe, FD gradient, float vs double.
#include "kernels/attention/rope.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

constexpr int64_t kHeads = 3;
constexpr int64_t kHeadDim = 10;
constexpr int64_t kRotaryDim = 6;  // partial: channels 6..9 pass through
constexpr double kTheta = 10000.0;
// Positions restart per document, as the packed batch passes them: docs {1, 3, 7, 2}.
const std::vector<int32_t> kPositions = {0, 0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 0, 1};
const int64_t kTokens = static_cast<int64_t>(kPositions.size());
const int64_t kN = kTokens * kHeads * kHeadDim;

template <typename T>
std::vector<T> forward(const Vec& x, const std::vector<int32_t>& pos) {
    auto y = cast<T>(x);
    rope_forward_ref(y.data(), pos.data(), static_cast<int64_t>(pos.size()), kHeads, kHeadDim,
                     kRotaryDim, kTheta);
    return y;
}

TEST_CASE("rope forward rotates channel pairs by pos * theta^(-2i/d)", "[kernels][rope]") {
    Rng rng(81);
    const Vec x = rng.normal(kN);
    const Vec y = forward<double>(x, kPositions);
    const int64_t half = kRotaryDim / 2;
    for (int64_t t = 0; t < kTokens; ++t) {
        for (int64_t h = 0; h < kHeads; ++h) {
            const int64_t base = (t * kHeads + h) * kHeadDim;
            for (int64_t i = 0; i < half; ++i) {
                const double angle =
                    kPositions[t] * std::pow(kTheta, -2.0 * double(i) / double(kRotaryDim));
                const double x1 = x[base + i], x2 = x[base + i + half];
                CHECK(y[base + i] ==
                      Approx(x1 * std::cos(angle) - x2 * std::sin(angle)).margin(1e-14));
                CHECK(y[base + i + half] ==
                      Approx(x2 * std::cos(angle) + x1 * std::sin(angle)).margin(1e-14));
            }
            for (int64_t c = kRotaryDim; c < kHeadDim; ++c) {
                CHECK(y[base + c] == x[base + c]);
            }
        }
    }
}

TEST_CASE("rope scores depend only on the relative position", "[kernels][rope]") {
    Rng rng(82);
    const Vec q = rng.normal(kHeads * kHeadDim);
    const Vec k = rng.normal(kHeads * kHeadDim);
    auto score = [&](int32_t m, int32_t n) {
        const Vec qr = forward<double>(q, {m});
        const Vec kr = forward<double>(k, {n});
        return dot(qr, kr);
    };
    CHECK(score(5, 2) == Approx(score(3, 0)).epsilon(1e-12));
    CHECK(score(1000, 993) == Approx(score(7, 0)).epsilon(1e-10));
    CHECK(score(4, 4) == Approx(dot(q, k)).epsilon(1e-12));
}

TEST_CASE("rope float follows transformers' fp32 recipe", "[kernels][rope]") {
    // Far out, the fp32 angle pos * inv_freq is rounded and the result visibly leaves the exact
    // rotation; the reference must reproduce exactly these fp32 steps.
    const int32_t pos = 40961;
    Rng rng(83);
    const Vec x = rng.normal(kHeads * kHeadDim);
    const auto y = forward<float>(x, {pos});
    const auto xf = cast<float>(x);
    REQUIRE(rel_diff(y, forward<double>(x, {pos})) > 1e-6);
    const int64_t half = kRotaryDim / 2;
    for (int64_t i = 0; i < half; ++i) {
        const float inv_freq = 1.0f / std::pow(float(kTheta), float(2 * i) / float(kRotaryDim));
        const float freq = float(pos) * inv_freq;
        const float c = std::cos(freq), s = std::sin(freq);
        for (int64_t h = 0; h < kHeads; ++h) {
            const int64_t base = h * kHeadDim;
            CHECK(y[base + i] == xf[base + i] * c - xf[base + i + half] * s);
            CHECK(y[base + i + half] == xf[base + i + half] * c + xf[base + i] * s);
        }
    }
}

TEST_CASE("rope backward is the inverse rotation and matches finite differences",
          "[kernels][rope][fd]") {
    Rng rng(84);
    Vec x = rng.normal(kN);
    const Vec weights = rng.normal(kN);
    auto loss = [&] { return dot(weights, forward<double>(x, kPositions)); };
    Vec dx = weights;
    rope_backward_ref(dx.data(), kPositions.data(), kTokens, kHeads, kHeadDim, kRotaryDim, kTheta);
    check_gradients("rope", loss, {{"x", &x, dx}});

    // R is orthogonal, so the transpose undoes the forward.
    Vec back = forward<double>(x, kPositions);
    rope_backward_ref(back.data(), kPositions.data(), kTokens, kHeads, kHeadDim, kRotaryDim,
                      kTheta);
    CHECK(rel_diff(back, x) < 1e-15);
}

TEST_CASE("rope float agrees with double", "[kernels][rope]") {
    Rng rng(85);
    const Vec x = rng.normal(kN);
    const Vec dy = rng.normal(kN);
    CHECK(rel_diff(forward<float>(x, kPositions), forward<double>(x, kPositions)) < 1e-5);
    auto dx_f = cast<float>(dy);
    Vec dx_d = dy;
    rope_backward_ref(dx_f.data(), kPositions.data(), kTokens, kHeads, kHeadDim, kRotaryDim,
                      kTheta);
    rope_backward_ref(dx_d.data(), kPositions.data(), kTokens, kHeads, kHeadDim, kRotaryDim,
                      kTheta);
    CHECK(rel_diff(dx_f, dx_d) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
