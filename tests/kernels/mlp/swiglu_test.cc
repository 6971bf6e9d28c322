// Tests of the SwiGLU reference: direct formula, FD gradients, float vs double.
#include "kernels/mlp/swiglu.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

constexpr int64_t kN = 37;

template <typename T>
struct Result {
    std::vector<T> h, dgate, dup;
};

template <typename T>
Result<T> run(const Vec& gate, const Vec& up, const Vec& dh) {
    const auto gt = cast<T>(gate), ut = cast<T>(up), dht = cast<T>(dh);
    Result<T> r{nans<T>(kN), nans<T>(kN), nans<T>(kN)};
    swiglu_forward_ref(r.h.data(), gt.data(), ut.data(), kN);
    swiglu_backward_ref(r.dgate.data(), r.dup.data(), dht.data(), gt.data(), ut.data(), kN);
    return r;
}

TEST_CASE("swiglu forward is silu(gate) * up", "[kernels][swiglu]") {
    Rng rng(51);
    const Vec gate = rng.normal(kN, 3.0);
    const Vec up = rng.normal(kN);
    const auto r = run<double>(gate, up, up);
    for (int64_t i = 0; i < kN; ++i) {
        const double sig = 1.0 / (1.0 + std::exp(-gate[i]));
        CHECK(r.h[i] == Approx(gate[i] * sig * up[i]).epsilon(1e-14));
    }
}

TEST_CASE("swiglu backward matches finite differences", "[kernels][swiglu][fd]") {
    Rng rng(52);
    Vec gate = rng.normal(kN, 3.0);
    Vec up = rng.normal(kN);
    const Vec weights = rng.normal(kN);
    auto loss = [&] {
        Vec h(static_cast<size_t>(kN));
        swiglu_forward_ref(h.data(), gate.data(), up.data(), kN);
        return dot(weights, h);
    };
    const auto r = run<double>(gate, up, weights);
    check_gradients("swiglu", loss, {{"gate", &gate, r.dgate}, {"up", &up, r.dup}});
}

TEST_CASE("swiglu float agrees with double", "[kernels][swiglu]") {
    Rng rng(53);
    const Vec gate = rng.normal(kN, 3.0);
    const Vec up = rng.normal(kN);
    const Vec dh = rng.normal(kN);
    const auto d = run<double>(gate, up, dh);
    const auto f = run<float>(gate, up, dh);
    CHECK(rel_diff(f.h, d.h) < 1e-5);
    CHECK(rel_diff(f.dgate, d.dgate) < 1e-5);
    CHECK(rel_diff(f.dup, d.dup) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
