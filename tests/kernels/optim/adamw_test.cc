// Tests of the AdamW reference: two hand-computed steps, the textbook AdamW formula over several
// steps (both lerp branches), pure decoupled weight decay, float vs double.
#include "kernels/optim/adamw.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

TEST_CASE("adamw matches two hand-computed steps", "[kernels][adamw]") {
    const AdamWHyper hyper{
        .lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    Vec param = {1.0, -2.0};
    Vec m = {0.0, 0.0};
    Vec v = {0.0, 0.0};

    // Step 1, g = (0.5, -3): m = 0.1 g, v = 0.001 g^2, bias corrections 0.1 and 0.001.
    adamw_step_ref(param.data(), m.data(), v.data(), Vec{0.5, -3.0}.data(), 2, hyper, 1);
    CHECK(m[0] == Approx(0.05).epsilon(1e-15));
    CHECK(m[1] == Approx(-0.3).epsilon(1e-15));
    CHECK(v[0] == Approx(0.00025).epsilon(1e-15));
    CHECK(v[1] == Approx(0.009).epsilon(1e-15));
    // sqrt(v / 0.001) = |g| so the step is lr * sign(g) / (1 + eps / |g|), after the decay 0.999.
    const double p0 = 0.999 - 0.05 / (0.5 + 1e-8);
    const double p1 = -1.998 + 0.3 / (3.0 + 1e-8);
    CHECK(param[0] == Approx(p0).epsilon(1e-15));
    CHECK(param[1] == Approx(p1).epsilon(1e-15));
    CHECK(param[0] == Approx(0.899000002).epsilon(1e-12));

    // Step 2, g = (-0.25, 1): bias corrections 1 - 0.9^2 = 0.19 and 1 - 0.999^2 = 0.001999.
    adamw_step_ref(param.data(), m.data(), v.data(), Vec{-0.25, 1.0}.data(), 2, hyper, 2);
    CHECK(m[0] == Approx(0.02).epsilon(1e-14));
    CHECK(m[1] == Approx(-0.17).epsilon(1e-14));
    CHECK(v[0] == Approx(0.00031225).epsilon(1e-14));
    CHECK(v[1] == Approx(0.009991).epsilon(1e-14));
    const double q0 =
        p0 * 0.999 - 0.1 / 0.19 * 0.02 / (std::sqrt(0.00031225) / std::sqrt(0.001999) + 1e-8);
    const double q1 =
        p1 * 0.999 + 0.1 / 0.19 * 0.17 / (std::sqrt(0.009991) / std::sqrt(0.001999) + 1e-8);
    CHECK(param[0] == Approx(q0).epsilon(1e-14));
    CHECK(param[1] == Approx(q1).epsilon(1e-14));
}

// Loshchilov & Hutter's AdamW written the textbook way (bias-corrected moments).
void textbook_adamw(Vec& p, Vec& m, Vec& v, const Vec& g, const AdamWHyper& h, int64_t step) {
    for (size_t i = 0; i < p.size(); ++i) {
        p[i] -= h.lr * h.weight_decay * p[i];
        m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
        v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
        const double m_hat = m[i] / (1 - std::pow(h.beta1, double(step)));
        const double v_hat = v[i] / (1 - std::pow(h.beta2, double(step)));
        p[i] -= h.lr * m_hat / (std::sqrt(v_hat) + h.eps);
    }
}

TEST_CASE("adamw matches the textbook formula over several steps", "[kernels][adamw]") {
    const int64_t n = 23;
    // beta1 = 0.3 makes torch's lerp take its other branch (weight 1 - beta1 >= 0.5).
    for (double beta1 : {0.9, 0.3}) {
        const AdamWHyper hyper{
            .lr = 3e-3, .beta1 = beta1, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1};
        Rng rng(141);
        Vec p = rng.normal(n), m = rng.normal(n, 0.1), v = rng.uniform(n, 0.01, 0.1);
        Vec p_ref = p, m_ref = m, v_ref = v;
        for (int64_t step = 1; step <= 4; ++step) {
            const Vec g = rng.normal(n);
            adamw_step_ref(p.data(), m.data(), v.data(), g.data(), n, hyper, step);
            textbook_adamw(p_ref, m_ref, v_ref, g, hyper, step);
        }
        CHECK(rel_diff(p, p_ref) < 1e-14);
        CHECK(rel_diff(m, m_ref) < 1e-14);
        CHECK(rel_diff(v, v_ref) < 1e-14);
    }
}

TEST_CASE("adamw weight decay is decoupled from the gradient", "[kernels][adamw]") {
    // A zero gradient on zero moments leaves only the decay: param * (1 - lr * wd).
    const AdamWHyper hyper{.lr = 0.5, .weight_decay = 0.2};
    Vec p = {3.0, -1.5}, m = {0.0, 0.0}, v = {0.0, 0.0};
    adamw_step_ref(p.data(), m.data(), v.data(), Vec{0.0, 0.0}.data(), 2, hyper, 7);
    CHECK(p[0] == Approx(3.0 * 0.9).epsilon(1e-15));
    CHECK(p[1] == Approx(-1.5 * 0.9).epsilon(1e-15));
}

TEST_CASE("adamw float agrees with double", "[kernels][adamw]") {
    const int64_t n = 41;
    const AdamWHyper hyper{.lr = 1e-3, .weight_decay = 0.05};
    Rng rng(142);
    Vec p = rng.normal(n), m = rng.normal(n, 0.1), v = rng.uniform(n, 0.01, 0.1);
    auto pf = cast<float>(p), mf = cast<float>(m), vf = cast<float>(v);
    for (int64_t step = 1; step <= 3; ++step) {
        const Vec g = rng.normal(n);
        const auto gf = cast<float>(g);
        adamw_step_ref(p.data(), m.data(), v.data(), g.data(), n, hyper, step);
        adamw_step_ref(pf.data(), mf.data(), vf.data(), gf.data(), n, hyper, step);
    }
    CHECK(rel_diff(pf, p) < 1e-6);
    CHECK(rel_diff(mf, m) < 1e-6);
    CHECK(rel_diff(vf, v) < 1e-6);
}

}  // namespace
}  // namespace deltatune::test
