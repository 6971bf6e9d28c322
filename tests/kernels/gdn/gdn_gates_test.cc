// Tests of the Gated DeltaNet gate reference: direct formula (both softplus branches), FD
// gradients for every input, float vs double.
#include "kernels/gdn/gdn_gates.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

constexpr int64_t kTokens = 13;
constexpr int64_t kHeads = 3;
constexpr int64_t kN = kTokens * kHeads;

template <typename T>
struct Result {
    std::vector<T> beta, g, db, da, dA_log, ddt_bias;
};

template <typename T>
Result<T> run(const Vec& b, const Vec& a, const Vec& A_log, const Vec& dt_bias, const Vec& dbeta,
              const Vec& dg, const Vec& dA_log0, const Vec& ddt_bias0) {
    const auto bt = cast<T>(b), at = cast<T>(a), At = cast<T>(A_log), dtt = cast<T>(dt_bias);
    const auto dbetat = cast<T>(dbeta), dgt = cast<T>(dg);
    Result<T> r{nans<T>(kN), nans<T>(kN),      nans<T>(kN),
                nans<T>(kN), cast<T>(dA_log0), cast<T>(ddt_bias0)};
    gdn_gates_forward_ref(r.beta.data(), r.g.data(), bt.data(), at.data(), At.data(), dtt.data(),
                          kTokens, kHeads);
    gdn_gates_backward_ref(r.db.data(), r.da.data(), r.dA_log.data(), r.ddt_bias.data(),
                           dbetat.data(), dgt.data(), bt.data(), at.data(), At.data(), dtt.data(),
                           kTokens, kHeads);
    return r;
}

// a with a few entries far above softplus' threshold (a + dt_bias > 20), away from the kink.
Vec make_a(Rng& rng) {
    Vec a = rng.normal(kN, 2.0);
    a[4] = 25.0;
    a[17] = 31.5;
    a[30] = 22.25;
    return a;
}

TEST_CASE("gdn_gates forward matches the direct formula", "[kernels][gdn_gates]") {
    Rng rng(71);
    const Vec b = rng.normal(kN, 2.0);
    const Vec a = make_a(rng);
    const Vec A_log = rng.normal(kHeads);
    const Vec dt_bias = rng.normal(kHeads);
    const Vec zeros(static_cast<size_t>(kHeads), 0.0);
    const auto r = run<double>(b, a, A_log, dt_bias, b, b, zeros, zeros);
    for (int64_t t = 0; t < kTokens; ++t) {
        for (int64_t h = 0; h < kHeads; ++h) {
            const int64_t n = t * kHeads + h;
            const double x = a[n] + dt_bias[h];
            const double softplus = x > 20.0 ? x : std::log(1.0 + std::exp(x));
            CHECK(r.beta[n] == Approx(1.0 / (1.0 + std::exp(-b[n]))).epsilon(1e-14));
            CHECK(r.g[n] == Approx(-std::exp(A_log[h]) * softplus).epsilon(1e-13));
            CHECK(r.g[n] < 0);
        }
    }
}

TEST_CASE("gdn_gates backward matches finite differences", "[kernels][gdn_gates][fd]") {
    Rng rng(72);
    Vec b = rng.normal(kN, 2.0);
    Vec a = make_a(rng);
    Vec A_log = rng.normal(kHeads);
    Vec dt_bias = rng.normal(kHeads);
    const Vec w_beta = rng.normal(kN);
    const Vec w_g = rng.normal(kN);
    const Vec dA_log0 = rng.normal(kHeads);
    const Vec ddt_bias0 = rng.normal(kHeads);
    auto loss = [&] {
        Vec beta(static_cast<size_t>(kN)), g(static_cast<size_t>(kN));
        gdn_gates_forward_ref(beta.data(), g.data(), b.data(), a.data(), A_log.data(),
                              dt_bias.data(), kTokens, kHeads);
        return dot(w_beta, beta) + dot(w_g, g);
    };
    const auto r = run<double>(b, a, A_log, dt_bias, w_beta, w_g, dA_log0, ddt_bias0);
    check_gradients("gdn_gates", loss,
                    {{"b", &b, r.db},
                     {"a", &a, r.da},
                     {"A_log", &A_log, minus(r.dA_log, dA_log0)},
                     {"dt_bias", &dt_bias, minus(r.ddt_bias, ddt_bias0)}});
}

TEST_CASE("gdn_gates float agrees with double", "[kernels][gdn_gates]") {
    Rng rng(73);
    const Vec b = rng.normal(kN, 2.0);
    const Vec a = make_a(rng);
    const Vec A_log = rng.normal(kHeads);
    const Vec dt_bias = rng.normal(kHeads);
    const Vec dbeta = rng.normal(kN);
    const Vec dg = rng.normal(kN);
    const Vec zeros(static_cast<size_t>(kHeads), 0.0);
    const auto d = run<double>(b, a, A_log, dt_bias, dbeta, dg, zeros, zeros);
    const auto f = run<float>(b, a, A_log, dt_bias, dbeta, dg, zeros, zeros);
    CHECK(rel_diff(f.beta, d.beta) < 1e-5);
    CHECK(rel_diff(f.g, d.g) < 1e-5);
    CHECK(rel_diff(f.db, d.db) < 1e-5);
    CHECK(rel_diff(f.da, d.da) < 1e-5);
    CHECK(rel_diff(f.dA_log, d.dA_log) < 1e-5);
    CHECK(rel_diff(f.ddt_bias, d.ddt_bias) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
