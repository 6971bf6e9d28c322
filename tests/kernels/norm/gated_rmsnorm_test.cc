// Tests of the gated RMSNorm reference: direct formula, FD gradients, float vs double.
#include "kernels/norm/gated_rmsnorm.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

constexpr int64_t kRows = 9;
constexpr int64_t kCols = 11;

template <typename T>
struct Result {
    std::vector<T> y, rstd, dx, dz, dw;
};

template <typename T>
Result<T> run(const Vec& x, const Vec& z, const Vec& w, const Vec& dy, const Vec& dw0, double eps) {
    const auto xt = cast<T>(x), zt = cast<T>(z), wt = cast<T>(w), dyt = cast<T>(dy);
    Result<T> r{nans<T>(kRows * kCols), nans<T>(kRows), nans<T>(kRows * kCols),
                nans<T>(kRows * kCols), cast<T>(dw0)};
    gated_rmsnorm_forward_ref(r.y.data(), r.rstd.data(), xt.data(), zt.data(), wt.data(), kRows,
                              kCols, T(eps));
    gated_rmsnorm_backward_ref(r.dx.data(), r.dz.data(), r.dw.data(), dyt.data(), xt.data(),
                               zt.data(), wt.data(), r.rstd.data(), kRows, kCols);
    return r;
}

TEST_CASE("gated_rmsnorm forward matches the direct formula", "[kernels][gated_rmsnorm]") {
    Rng rng(31);
    const Vec x = rng.normal(kRows * kCols, 1.5);
    const Vec z = rng.normal(kRows * kCols, 2.0);
    const Vec w = rng.normal(kCols, 1.0, 1.0);
    const double eps = 1e-6;
    const auto r = run<double>(x, z, w, x, w, eps);
    for (int64_t i = 0; i < kRows; ++i) {
        double ms = 0;
        for (int64_t c = 0; c < kCols; ++c) {
            ms += x[i * kCols + c] * x[i * kCols + c] / kCols;
        }
        for (int64_t c = 0; c < kCols; ++c) {
            const double zz = z[i * kCols + c];
            const double expected =
                w[c] * x[i * kCols + c] / std::sqrt(ms + eps) * zz / (1.0 + std::exp(-zz));
            CHECK(r.y[i * kCols + c] == Approx(expected).epsilon(1e-13));
        }
    }
}

TEST_CASE("gated_rmsnorm backward matches finite differences", "[kernels][gated_rmsnorm][fd]") {
    Rng rng(32);
    Vec x = rng.normal(kRows * kCols);
    Vec z = rng.normal(kRows * kCols, 2.0);
    Vec w = rng.normal(kCols, 0.5, 1.0);
    const Vec weights = rng.normal(kRows * kCols);
    const Vec dw0 = rng.normal(kCols);
    const double eps = 1e-6;
    auto loss = [&] {
        Vec y(static_cast<size_t>(kRows * kCols)), rstd(static_cast<size_t>(kRows));
        gated_rmsnorm_forward_ref(y.data(), rstd.data(), x.data(), z.data(), w.data(), kRows, kCols,
                                  eps);
        return dot(weights, y);
    };
    const auto r = run<double>(x, z, w, weights, dw0, eps);
    check_gradients("gated_rmsnorm", loss,
                    {{"x", &x, r.dx}, {"z", &z, r.dz}, {"w", &w, minus(r.dw, dw0)}});
}

TEST_CASE("gated_rmsnorm float agrees with double", "[kernels][gated_rmsnorm]") {
    Rng rng(33);
    const Vec x = rng.normal(kRows * kCols);
    const Vec z = rng.normal(kRows * kCols, 2.0);
    const Vec w = rng.normal(kCols, 0.5, 1.0);
    const Vec dy = rng.normal(kRows * kCols);
    const Vec dw0(static_cast<size_t>(kCols), 0.0);
    const auto d = run<double>(x, z, w, dy, dw0, 1e-6);
    const auto f = run<float>(x, z, w, dy, dw0, 1e-6);
    CHECK(rel_diff(f.y, d.y) < 1e-5);
    CHECK(rel_diff(f.dx, d.dx) < 1e-5);
    CHECK(rel_diff(f.dz, d.dz) < 1e-5);
    CHECK(rel_diff(f.dw, d.dw) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
