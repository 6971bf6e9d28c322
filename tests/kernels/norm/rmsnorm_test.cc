// Tests of the zero-centred RMSNorm reference: direct formula, FD gradients, float vs double.
#include "kernels/norm/rmsnorm.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

constexpr int64_t kRows = 7;
constexpr int64_t kCols = 13;

template <typename T>
struct Result {
    std::vector<T> y, rstd, dx, dw;
};

// Forward and backward in T; dw starts from dw0 to exercise the += contract.
template <typename T>
Result<T> run(const Vec& x, const Vec& w, const Vec& dy, const Vec& dw0, double eps) {
    const auto xt = cast<T>(x), wt = cast<T>(w), dyt = cast<T>(dy);
    Result<T> r{nans<T>(kRows * kCols), nans<T>(kRows), nans<T>(kRows * kCols), cast<T>(dw0)};
    rmsnorm_forward_ref(r.y.data(), r.rstd.data(), xt.data(), wt.data(), kRows, kCols, T(eps));
    rmsnorm_backward_ref(r.dx.data(), r.dw.data(), dyt.data(), xt.data(), wt.data(), r.rstd.data(),
                         kRows, kCols);
    return r;
}

TEST_CASE("rmsnorm forward matches the direct formula", "[kernels][rmsnorm]") {
    Rng rng(21);
    const Vec x = rng.normal(kRows * kCols, 2.0);
    const Vec w = rng.normal(kCols, 0.3);
    const double eps = 1e-6;
    const auto r = run<double>(x, w, x, w, eps);
    for (int64_t i = 0; i < kRows; ++i) {
        double ms = 0;
        for (int64_t c = 0; c < kCols; ++c) {
            ms += x[i * kCols + c] * x[i * kCols + c] / kCols;
        }
        CHECK(r.rstd[i] == Approx(1.0 / std::sqrt(ms + eps)).epsilon(1e-14));
        for (int64_t c = 0; c < kCols; ++c) {
            const double expected = x[i * kCols + c] / std::sqrt(ms + eps) * (1.0 + w[c]);
            CHECK(r.y[i * kCols + c] == Approx(expected).epsilon(1e-13));
        }
    }
}

TEST_CASE("rmsnorm backward matches finite differences", "[kernels][rmsnorm][fd]") {
    Rng rng(22);
    Vec x = rng.normal(kRows * kCols);
    Vec w = rng.normal(kCols, 0.5);
    const Vec weights = rng.normal(kRows * kCols);
    const Vec dw0 = rng.normal(kCols);
    const double eps = 1e-5;
    auto loss = [&] {
        Vec y(static_cast<size_t>(kRows * kCols)), rstd(static_cast<size_t>(kRows));
        rmsnorm_forward_ref(y.data(), rstd.data(), x.data(), w.data(), kRows, kCols, eps);
        return dot(weights, y);
    };
    const auto r = run<double>(x, w, weights, dw0, eps);
    check_gradients("rmsnorm", loss, {{"x", &x, r.dx}, {"w", &w, minus(r.dw, dw0)}});
}

TEST_CASE("rmsnorm float agrees with double", "[kernels][rmsnorm]") {
    Rng rng(23);
    const Vec x = rng.normal(kRows * kCols);
    const Vec w = rng.normal(kCols, 0.5);
    const Vec dy = rng.normal(kRows * kCols);
    const Vec dw0(static_cast<size_t>(kCols), 0.0);
    const auto d = run<double>(x, w, dy, dw0, 1e-6);
    const auto f = run<float>(x, w, dy, dw0, 1e-6);
    CHECK(rel_diff(f.y, d.y) < 1e-5);
    CHECK(rel_diff(f.rstd, d.rstd) < 1e-5);
    CHECK(rel_diff(f.dx, d.dx) < 1e-5);
    CHECK(rel_diff(f.dw, d.dw) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
