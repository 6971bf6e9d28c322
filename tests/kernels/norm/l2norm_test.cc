// Tests of the L2-norm reference: unit rows, FD gradient, float vs double.
#include "kernels/norm/l2norm.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

constexpr int64_t kRows = 10;
constexpr int64_t kCols = 7;

template <typename T>
struct Result {
    std::vector<T> y, rnorm, dx;
};

template <typename T>
Result<T> run(const Vec& x, const Vec& dy, double eps) {
    const auto xt = cast<T>(x), dyt = cast<T>(dy);
    Result<T> r{nans<T>(kRows * kCols), nans<T>(kRows), nans<T>(kRows * kCols)};
    l2norm_forward_ref(r.y.data(), r.rnorm.data(), xt.data(), kRows, kCols, T(eps));
    l2norm_backward_ref(r.dx.data(), dyt.data(), r.y.data(), r.rnorm.data(), kRows, kCols);
    return r;
}

TEST_CASE("l2norm forward gives x / sqrt(|x|^2 + eps)", "[kernels][l2norm]") {
    Rng rng(41);
    const Vec x = rng.normal(kRows * kCols, 3.0);
    const double eps = 1e-6;
    const auto r = run<double>(x, x, eps);
    for (int64_t i = 0; i < kRows; ++i) {
        double sq = 0;
        for (int64_t c = 0; c < kCols; ++c) {
            sq += x[i * kCols + c] * x[i * kCols + c];
        }
        CHECK(r.rnorm[i] == Approx(1.0 / std::sqrt(sq + eps)).epsilon(1e-14));
        for (int64_t c = 0; c < kCols; ++c) {
            CHECK(r.y[i * kCols + c] ==
                  Approx(x[i * kCols + c] / std::sqrt(sq + eps)).epsilon(1e-14));
        }
    }
}

TEST_CASE("l2norm backward matches finite differences", "[kernels][l2norm][fd]") {
    Rng rng(42);
    Vec x = rng.normal(kRows * kCols);
    const Vec weights = rng.normal(kRows * kCols);
    // A large eps makes the eps term matter, so the test covers the exact gradient with eps.
    const double eps = 0.5;
    auto loss = [&] {
        Vec y(static_cast<size_t>(kRows * kCols)), rnorm(static_cast<size_t>(kRows));
        l2norm_forward_ref(y.data(), rnorm.data(), x.data(), kRows, kCols, eps);
        return dot(weights, y);
    };
    const auto r = run<double>(x, weights, eps);
    check_gradients("l2norm", loss, {{"x", &x, r.dx}});
}

TEST_CASE("l2norm float agrees with double", "[kernels][l2norm]") {
    Rng rng(43);
    const Vec x = rng.normal(kRows * kCols);
    const Vec dy = rng.normal(kRows * kCols);
    const auto d = run<double>(x, dy, 1e-6);
    const auto f = run<float>(x, dy, 1e-6);
    CHECK(rel_diff(f.y, d.y) < 1e-5);
    CHECK(rel_diff(f.rnorm, d.rnorm) < 1e-5);
    CHECK(rel_diff(f.dx, d.dx) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
