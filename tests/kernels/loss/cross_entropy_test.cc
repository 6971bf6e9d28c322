// Tests of the cross-entropy reference: direct -log softmax, ignored (-100) rows, large logits,
// FD gradient, float vs double.
#include "kernels/loss/cross_entropy.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

constexpr int64_t kRows = 9;
constexpr int64_t kVocab = 37;
// Rows 2, 3 and 8 carry torch's ignore_index (the shifted-out last token and padding).
static_assert(kIgnoreIndex == -100);
const std::vector<int32_t> kTargets = {5, 0, -100, -100, 36, 17, 5, 21, -100};

template <typename T>
struct Result {
    std::vector<T> losses, lse, dlogits;
};

template <typename T>
Result<T> run(const Vec& logits, double grad_scale) {
    const auto lt = cast<T>(logits);
    Result<T> r{nans<T>(kRows), nans<T>(kRows), nans<T>(kRows * kVocab)};
    cross_entropy_forward_ref(r.losses.data(), r.lse.data(), lt.data(), kTargets.data(), kRows,
                              kVocab);
    cross_entropy_backward_ref(r.dlogits.data(), lt.data(), r.lse.data(), kTargets.data(), kRows,
                               kVocab, T(grad_scale));
    return r;
}

TEST_CASE("cross_entropy forward is -log softmax[target], 0 on ignored rows",
          "[kernels][cross_entropy]") {
    Rng rng(131);
    const Vec logits = rng.normal(kRows * kVocab, 3.0);
    const auto r = run<double>(logits, 1.0);
    for (int64_t i = 0; i < kRows; ++i) {
        double sum = 0;
        for (int64_t c = 0; c < kVocab; ++c) {
            sum += std::exp(logits[i * kVocab + c]);
        }
        CHECK(r.lse[i] == Approx(std::log(sum)).epsilon(1e-14));
        if (kTargets[i] == kIgnoreIndex) {
            CHECK(r.losses[i] == 0.0);
        } else {
            const double p = std::exp(logits[i * kVocab + kTargets[i]]) / sum;
            CHECK(r.losses[i] == Approx(-std::log(p)).epsilon(1e-13));
        }
    }
}

TEST_CASE("cross_entropy gradient is zero on ignored rows and rows sum to zero",
          "[kernels][cross_entropy]") {
    Rng rng(132);
    const Vec logits = rng.normal(kRows * kVocab, 3.0);
    const double grad_scale = 0.37;
    const auto r = run<double>(logits, grad_scale);
    for (int64_t i = 0; i < kRows; ++i) {
        const Vec row = rows_of(r.dlogits, i, i + 1, kVocab);
        if (kTargets[i] == kIgnoreIndex) {
            CHECK(max_abs(row) == 0.0);
        } else {
            double sum = 0;
            for (double x : row) {
                sum += x;
            }
            CHECK(std::abs(sum) < 1e-14);
            CHECK(row[kTargets[i]] < 0);
        }
    }
}

TEST_CASE("cross_entropy is stable for large logits", "[kernels][cross_entropy]") {
    Rng rng(133);
    Vec logits = rng.normal(kRows * kVocab);
    for (double& x : logits) {
        // Rounded to float so both precisions see the same inputs (float's ulp at 1000 is 6e-5).
        x = static_cast<float>(x + 1000.0);
    }
    const auto f = run<float>(logits, 1.0);
    const auto d = run<double>(logits, 1.0);
    CHECK(all_finite(f.losses));
    CHECK(all_finite(f.dlogits));
    CHECK(rel_diff(f.losses, d.losses) < 1e-5);
    CHECK(rel_diff(f.dlogits, d.dlogits) < 1e-5);
}

TEST_CASE("cross_entropy backward matches finite differences", "[kernels][cross_entropy][fd]") {
    Rng rng(134);
    Vec logits = rng.normal(kRows * kVocab, 2.0);
    // The backward's only weighting is one grad_scale for all rows (e.g. 1 / tokens).
    const double grad_scale = 0.37;
    auto loss = [&] {
        Vec losses(static_cast<size_t>(kRows)), lse(static_cast<size_t>(kRows));
        cross_entropy_forward_ref(losses.data(), lse.data(), logits.data(), kTargets.data(), kRows,
                                  kVocab);
        return grad_scale * dot(Vec(static_cast<size_t>(kRows), 1.0), losses);
    };
    const auto r = run<double>(logits, grad_scale);
    check_gradients("cross_entropy", loss, {{"logits", &logits, r.dlogits}});
}

TEST_CASE("cross_entropy float agrees with double", "[kernels][cross_entropy]") {
    Rng rng(135);
    const Vec logits = rng.normal(kRows * kVocab, 2.0);
    const auto d = run<double>(logits, 0.25);
    const auto f = run<float>(logits, 0.25);
    CHECK(rel_diff(f.losses, d.losses) < 1e-5);
    CHECK(rel_diff(f.lse, d.lse) < 1e-5);
    CHECK(rel_diff(f.dlogits, d.dlogits) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
