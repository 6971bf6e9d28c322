// Tests of the linear reference: naive formulas at a medium size, null-gradient skips, FD
// gradients, float vs double.
#include "kernels/mlp/linear.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

template <typename T>
struct Result {
    std::vector<T> y, dx, dw;
};

template <typename T>
Result<T> run(const Vec& x, const Vec& w, const Vec& dy, const Vec& dw0, int64_t rows, int64_t in,
              int64_t out) {
    const auto xt = cast<T>(x), wt = cast<T>(w), dyt = cast<T>(dy);
    Result<T> r{nans<T>(rows * out), nans<T>(rows * in), cast<T>(dw0)};
    linear_forward_ref(r.y.data(), xt.data(), wt.data(), rows, in, out);
    linear_backward_ref(r.dx.data(), r.dw.data(), dyt.data(), xt.data(), wt.data(), rows, in, out);
    return r;
}

TEST_CASE("linear matches the naive formulas", "[kernels][linear]") {
    const int64_t rows = 67, in = 129, out = 257;
    Rng rng(61);
    const Vec x = rng.normal(rows * in);
    const Vec w = rng.normal(out * in);
    const Vec dy = rng.normal(rows * out);
    const Vec dw0 = rng.normal(out * in);
    const auto r = run<double>(x, w, dy, dw0, rows, in, out);
    Vec y(static_cast<size_t>(rows * out), 0.0);
    Vec dx(static_cast<size_t>(rows * in), 0.0);
    Vec dw = dw0;
    // Index order straight from the definitions, unlike the reference's loop order.
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t o = 0; o < out; ++o) {
            for (int64_t c = 0; c < in; ++c) {
                y[i * out + o] += x[i * in + c] * w[o * in + c];
                dx[i * in + c] += dy[i * out + o] * w[o * in + c];
                dw[o * in + c] += dy[i * out + o] * x[i * in + c];
            }
        }
    }
    CHECK(rel_diff(r.y, y) < 1e-13);
    CHECK(rel_diff(r.dx, dx) < 1e-13);
    CHECK(rel_diff(r.dw, dw) < 1e-13);
}

TEST_CASE("linear backward skips a null dx or dw", "[kernels][linear]") {
    const int64_t rows = 5, in = 9, out = 3;
    Rng rng(62);
    const Vec x = rng.normal(rows * in);
    const Vec w = rng.normal(out * in);
    const Vec dy = rng.normal(rows * out);
    const auto both = run<double>(x, w, dy, Vec(static_cast<size_t>(out * in), 0.0), rows, in, out);

    Vec dx_only = nans(rows * in);
    linear_backward_ref(dx_only.data(), static_cast<double*>(nullptr), dy.data(), x.data(),
                        w.data(), rows, in, out);
    CHECK(dx_only == both.dx);

    Vec dw_only(static_cast<size_t>(out * in), 0.0);
    linear_backward_ref(static_cast<double*>(nullptr), dw_only.data(), dy.data(), x.data(),
                        w.data(), rows, in, out);
    CHECK(dw_only == both.dw);
}

TEST_CASE("linear backward matches finite differences", "[kernels][linear][fd]") {
    const int64_t rows = 11, in = 13, out = 7;
    Rng rng(63);
    Vec x = rng.normal(rows * in);
    Vec w = rng.normal(out * in);
    const Vec weights = rng.normal(rows * out);
    const Vec dw0 = rng.normal(out * in);
    auto loss = [&] {
        Vec y(static_cast<size_t>(rows * out));
        linear_forward_ref(y.data(), x.data(), w.data(), rows, in, out);
        return dot(weights, y);
    };
    const auto r = run<double>(x, w, weights, dw0, rows, in, out);
    check_gradients("linear", loss, {{"x", &x, r.dx}, {"w", &w, minus(r.dw, dw0)}});
}

TEST_CASE("the LoRA branch matches its formula and finite differences", "[kernels][linear][fd]") {
    const int64_t rows = 9, in = 12, out = 10, rank = 3;
    const double scale = 2.5;
    Rng rng(65);
    Vec x = rng.normal(rows * in), a = rng.normal(rank * in), b = rng.normal(out * rank);
    const Vec weights = rng.normal(rows * out), y0 = rng.normal(rows * out);
    auto branch = [&] {
        Vec y = y0;
        lora_forward_ref(y.data(), x.data(), a.data(), b.data(), rows, in, out, rank, scale);
        return y;
    };
    // y = y0 + scale x A^T B^T, straight from the definition.
    const Vec y = branch();
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t o = 0; o < out; ++o) {
            double want = y0[i * out + o];
            for (int64_t k = 0; k < rank; ++k) {
                double u = 0;
                for (int64_t c = 0; c < in; ++c) u += x[i * in + c] * a[k * in + c];
                want += scale * u * b[o * rank + k];
            }
            CHECK(y[i * out + o] == Approx(want).epsilon(1e-12));
        }
    }
    // Accumulating gradients: start from non-zero ones and check the increments.
    const Vec dx0 = rng.normal(rows * in), da0 = rng.normal(rank * in),
              db0 = rng.normal(out * rank);
    Vec dx = dx0, da = da0, db = db0;
    lora_backward_ref(dx.data(), da.data(), db.data(), weights.data(), x.data(), a.data(), b.data(),
                      rows, in, out, rank, scale);
    auto loss = [&] { return dot(weights, branch()); };
    check_gradients(
        "lora", loss,
        {{"x", &x, minus(dx, dx0)}, {"A", &a, minus(da, da0)}, {"B", &b, minus(db, db0)}});
}

TEST_CASE("linear float agrees with double", "[kernels][linear]") {
    const int64_t rows = 19, in = 33, out = 17;
    Rng rng(64);
    const Vec x = rng.normal(rows * in);
    const Vec w = rng.normal(out * in);
    const Vec dy = rng.normal(rows * out);
    const Vec dw0(static_cast<size_t>(out * in), 0.0);
    const auto d = run<double>(x, w, dy, dw0, rows, in, out);
    const auto f = run<float>(x, w, dy, dw0, rows, in, out);
    CHECK(rel_diff(f.y, d.y) < 1e-5);
    CHECK(rel_diff(f.dx, d.dx) < 1e-5);
    CHECK(rel_diff(f.dw, d.dw) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
