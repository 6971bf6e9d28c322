// Tests of the recurrent gated delta rule reference: a hand-expanded two-token formula, document
// isolation, FD gradients for q/k/v/g/beta at value/key head ratios 1, 2 and 3, float vs double.
#include "kernels/gdn/gdn_chunked_rule.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

struct Shape {
    std::vector<int32_t> lengths;
    int64_t k_heads, v_heads, dk, dv;

    int64_t tokens() const { return cu_seqlens_of(lengths).back(); }
    int64_t qk_size() const { return tokens() * k_heads * dk; }
    int64_t v_size() const { return tokens() * v_heads * dv; }
    int64_t gate_size() const { return tokens() * v_heads; }
    double scale() const { return 1.0 / std::sqrt(double(dk)); }
};

struct Inputs {
    Vec q, k, v, g, beta, dout;
};

// Unit-norm q/k rows (the model L2-normalises them), decays in (-1, 0), beta in (0, 1).
Inputs make_inputs(const Shape& s, uint64_t seed) {
    Rng rng(seed);
    Inputs in{rng.normal(s.qk_size()),
              rng.normal(s.qk_size()),
              rng.normal(s.v_size()),
              rng.uniform(s.gate_size(), -1.0, -0.02),
              rng.uniform(s.gate_size(), 0.05, 0.95),
              rng.normal(s.v_size())};
    for (Vec* x : {&in.q, &in.k}) {
        for (int64_t row = 0; row < s.tokens() * s.k_heads; ++row) {
            double sq = 0;
            for (int64_t a = 0; a < s.dk; ++a) {
                sq += (*x)[row * s.dk + a] * (*x)[row * s.dk + a];
            }
            for (int64_t a = 0; a < s.dk; ++a) {
                (*x)[row * s.dk + a] /= std::sqrt(sq);
            }
        }
    }
    return in;
}

template <typename T>
struct Result {
    std::vector<T> out, dq, dk, dv, dg, dbeta;
};

template <typename T>
std::vector<T> forward(const Shape& s, const Inputs& in) {
    const auto cu = cu_seqlens_of(s.lengths);
    const auto q = cast<T>(in.q), k = cast<T>(in.k), v = cast<T>(in.v);
    const auto g = cast<T>(in.g), beta = cast<T>(in.beta);
    auto out = nans<T>(s.v_size());
    gated_delta_rule_forward_ref(out.data(), q.data(), k.data(), v.data(), g.data(), beta.data(),
                                 cu.data(), static_cast<int64_t>(s.lengths.size()), s.k_heads,
                                 s.v_heads, s.dk, s.dv, T(s.scale()));
    return out;
}

template <typename T>
Result<T> run(const Shape& s, const Inputs& in) {
    const auto cu = cu_seqlens_of(s.lengths);
    const auto q = cast<T>(in.q), k = cast<T>(in.k), v = cast<T>(in.v);
    const auto g = cast<T>(in.g), beta = cast<T>(in.beta), dout = cast<T>(in.dout);
    Result<T> r{forward<T>(s, in),   nans<T>(s.qk_size()),   nans<T>(s.qk_size()),
                nans<T>(s.v_size()), nans<T>(s.gate_size()), nans<T>(s.gate_size())};
    gated_delta_rule_backward_ref(
        r.dq.data(), r.dk.data(), r.dv.data(), r.dg.data(), r.dbeta.data(), dout.data(), q.data(),
        k.data(), v.data(), g.data(), beta.data(), cu.data(),
        static_cast<int64_t>(s.lengths.size()), s.k_heads, s.v_heads, s.dk, s.dv, T(s.scale()));
    return r;
}

Inputs doc_of(const Shape& s, const Inputs& in, int64_t b, int64_t e) {
    const int64_t qkw = s.k_heads * s.dk, vw = s.v_heads * s.dv;
    return Inputs{rows_of(in.q, b, e, qkw),          rows_of(in.k, b, e, qkw),
                  rows_of(in.v, b, e, vw),           rows_of(in.g, b, e, s.v_heads),
                  rows_of(in.beta, b, e, s.v_heads), rows_of(in.dout, b, e, vw)};
}

TEST_CASE("gated_delta_rule forward matches the two-token expansion",
          "[kernels][gated_delta_rule]") {
    // Two documents of two tokens; value heads 0,1 read key head 0 and 2,3 read key head 1.
    const Shape s{{2, 2}, 2, 4, 3, 2};
    const Inputs in = make_inputs(s, 121);
    const Vec out = forward<double>(s, in);
    const double sc = s.scale();
    auto kq = [&](const Vec& x, int64_t t, int64_t kh) { return &x[(t * s.k_heads + kh) * s.dk]; };
    auto dot3 = [&](const double* a, const double* b) {
        double r = 0;
        for (int64_t i = 0; i < s.dk; ++i) {
            r += a[i] * b[i];
        }
        return r;
    };
    for (int64_t t1 : {0, 2}) {
        const int64_t t2 = t1 + 1;
        for (int64_t j = 0; j < s.v_heads; ++j) {
            const int64_t kh = j / 2;
            const double* k1 = kq(in.k, t1, kh);
            const double* k2 = kq(in.k, t2, kh);
            const double* q1 = kq(in.q, t1, kh);
            const double* q2 = kq(in.q, t2, kh);
            const double b1 = in.beta[t1 * s.v_heads + j], b2 = in.beta[t2 * s.v_heads + j];
            const double e2 = std::exp(in.g[t2 * s.v_heads + j]);
            for (int64_t c = 0; c < s.dv; ++c) {
                const double v1 = in.v[(t1 * s.v_heads + j) * s.dv + c];
                const double v2 = in.v[(t2 * s.v_heads + j) * s.dv + c];
                // S1 = b1 k1 v1^T, so o1 = b1 (sc q1 . k1) v1 and p2 = e2 b1 (k1 . k2) v1.
                const double o1 = b1 * sc * dot3(q1, k1) * v1;
                const double delta2 = b2 * (v2 - e2 * b1 * dot3(k1, k2) * v1);
                // S2 = e2 S1 + k2 delta2^T.
                const double o2 = sc * (e2 * b1 * dot3(q2, k1) * v1 + dot3(q2, k2) * delta2);
                CHECK(out[(t1 * s.v_heads + j) * s.dv + c] == Approx(o1).epsilon(1e-14));
                CHECK(out[(t2 * s.v_heads + j) * s.dv + c] == Approx(o2).epsilon(1e-13));
            }
        }
    }
}

TEST_CASE("gated_delta_rule never mixes documents", "[kernels][gated_delta_rule]") {
    const Shape s{{5, 1, 70, 3}, 2, 4, 6, 5};
    const Inputs in = make_inputs(s, 122);
    const auto packed = run<double>(s, in);
    const auto cu = cu_seqlens_of(s.lengths);
    const int64_t qkw = s.k_heads * s.dk, vw = s.v_heads * s.dv;
    for (size_t d = 0; d < s.lengths.size(); ++d) {
        const int64_t b = cu[d], e = cu[d + 1];
        const Shape alone{{s.lengths[d]}, s.k_heads, s.v_heads, s.dk, s.dv};
        const auto r = run<double>(alone, doc_of(s, in, b, e));
        CHECK(rel_diff(r.out, rows_of(packed.out, b, e, vw)) < 1e-12);
        CHECK(rel_diff(r.dq, rows_of(packed.dq, b, e, qkw)) < 1e-12);
        CHECK(rel_diff(r.dk, rows_of(packed.dk, b, e, qkw)) < 1e-12);
        CHECK(rel_diff(r.dv, rows_of(packed.dv, b, e, vw)) < 1e-12);
        CHECK(rel_diff(r.dg, rows_of(packed.dg, b, e, s.v_heads)) < 1e-12);
        CHECK(rel_diff(r.dbeta, rows_of(packed.dbeta, b, e, s.v_heads)) < 1e-12);
    }
    // Perturb all of document 0's inputs: the state must not leak into documents 1..3.
    Inputs changed = in;
    for (int64_t n = 0; n < cu[1] * s.v_heads * s.dv; ++n) {
        changed.v[n] += 1.0;
    }
    for (int64_t n = 0; n < cu[1] * s.v_heads; ++n) {
        changed.g[n] *= 0.5;
        changed.beta[n] = 1.0 - changed.beta[n];
    }
    for (int64_t n = 0; n < cu[1] * qkw; ++n) {
        changed.k[n] = -changed.k[n];
    }
    const Vec out = forward<double>(s, changed);
    for (int64_t n = 0; n < s.v_size(); ++n) {
        if (n < cu[1] * vw) {
            CHECK(out[n] != packed.out[n]);
        } else {
            REQUIRE(out[n] == packed.out[n]);
        }
    }
}

TEST_CASE("gated_delta_rule backward matches finite differences",
          "[kernels][gated_delta_rule][fd]") {
    for (int64_t ratio : {1, 2, 3}) {
        INFO("v_heads / k_heads = " << ratio);
        const Shape s{{1, 3, 7, 2}, 2, 2 * ratio, 5, 3};
        Inputs in = make_inputs(s, 123);
        auto loss = [&] { return dot(in.dout, forward<double>(s, in)); };
        const auto r = run<double>(s, in);
        check_gradients("gated_delta_rule r=" + std::to_string(ratio), loss,
                        {{"q", &in.q, r.dq},
                         {"k", &in.k, r.dk},
                         {"v", &in.v, r.dv},
                         {"g", &in.g, r.dg},
                         {"beta", &in.beta, r.dbeta}});
    }
}

TEST_CASE("gated_delta_rule float agrees with double", "[kernels][gated_delta_rule]") {
    const Shape s{{40, 1, 29}, 2, 4, 8, 6};
    const Inputs in = make_inputs(s, 124);
    const auto d = run<double>(s, in);
    const auto f = run<float>(s, in);
    CHECK(rel_diff(f.out, d.out) < 1e-5);
    CHECK(rel_diff(f.dq, d.dq) < 1e-5);
    CHECK(rel_diff(f.dk, d.dk) < 1e-5);
    CHECK(rel_diff(f.dv, d.dv) < 1e-5);
    CHECK(rel_diff(f.dg, d.dg) < 1e-5);
    CHECK(rel_diff(f.dbeta, d.dbeta) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
