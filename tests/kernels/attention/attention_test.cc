// Tests of the varlen causal GQA attention reference and the sigmoid output gate: direct softmax
// formula, document isolation, FD gradients for q/k/v (GQA groups 1, 2, 3), float vs double.
#include "kernels/attention/attention.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

struct Shape {
    std::vector<int32_t> lengths;
    int64_t q_heads, kv_heads, head_dim;

    int64_t tokens() const { return cu_seqlens_of(lengths).back(); }
    int64_t q_size() const { return tokens() * q_heads * head_dim; }
    int64_t kv_size() const { return tokens() * kv_heads * head_dim; }
    double scale() const { return 1.0 / std::sqrt(double(head_dim)); }
};

struct Inputs {
    Vec q, k, v, dout;
};

Inputs make_inputs(const Shape& s, uint64_t seed) {
    Rng rng(seed);
    return Inputs{rng.normal(s.q_size()), rng.normal(s.kv_size()), rng.normal(s.kv_size()),
                  rng.normal(s.q_size())};
}

template <typename T>
struct Result {
    std::vector<T> out, lse, dq, dk, dv;
};

template <typename T>
Result<T> run(const Shape& s, const Inputs& in) {
    const auto cu = cu_seqlens_of(s.lengths);
    const auto num_docs = static_cast<int64_t>(s.lengths.size());
    const auto q = cast<T>(in.q), k = cast<T>(in.k), v = cast<T>(in.v), dout = cast<T>(in.dout);
    Result<T> r{nans<T>(s.q_size()), nans<T>(s.tokens() * s.q_heads), nans<T>(s.q_size()),
                nans<T>(s.kv_size()), nans<T>(s.kv_size())};
    attention_forward_ref(r.out.data(), r.lse.data(), q.data(), k.data(), v.data(), cu.data(),
                          num_docs, s.q_heads, s.kv_heads, s.head_dim, T(s.scale()));
    attention_backward_ref(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(), k.data(),
                           v.data(), r.out.data(), r.lse.data(), cu.data(), num_docs, s.q_heads,
                           s.kv_heads, s.head_dim, T(s.scale()));
    return r;
}

const Shape kGroup2{{1, 3, 7, 2}, 4, 2, 5};
const Shape kGroup1{{1, 3, 7, 2}, 3, 3, 6};
const Shape kGroup3{{2, 1, 7, 3}, 6, 2, 5};
const Shape kLong{{70, 1, 33}, 4, 2, 8};

TEST_CASE("attention forward matches a direct softmax formula", "[kernels][attention]") {
    for (const Shape& s : {kGroup2, kGroup1, kGroup3}) {
        const Inputs in = make_inputs(s, 101);
        const auto r = run<double>(s, in);
        const auto cu = cu_seqlens_of(s.lengths);
        Vec out(static_cast<size_t>(s.q_size())), lse(static_cast<size_t>(s.tokens() * s.q_heads));
        const int64_t group = s.q_heads / s.kv_heads;
        for (size_t d = 0; d + 1 < cu.size(); ++d) {
            for (int64_t i = cu[d]; i < cu[d + 1]; ++i) {
                for (int64_t h = 0; h < s.q_heads; ++h) {
                    // softmax_j(exp(scale q_i . k_j)) over j in [doc start, i], no max shift.
                    const int64_t kvh = h / group;
                    Vec e;
                    double sum = 0;
                    for (int64_t j = cu[d]; j <= i; ++j) {
                        double qk = 0;
                        for (int64_t c = 0; c < s.head_dim; ++c) {
                            qk += in.q[(i * s.q_heads + h) * s.head_dim + c] *
                                  in.k[(j * s.kv_heads + kvh) * s.head_dim + c];
                        }
                        e.push_back(std::exp(s.scale() * qk));
                        sum += e.back();
                    }
                    lse[i * s.q_heads + h] = std::log(sum);
                    for (int64_t c = 0; c < s.head_dim; ++c) {
                        double o = 0;
                        for (int64_t j = cu[d]; j <= i; ++j) {
                            o += e[j - cu[d]] / sum * in.v[(j * s.kv_heads + kvh) * s.head_dim + c];
                        }
                        out[(i * s.q_heads + h) * s.head_dim + c] = o;
                    }
                }
            }
        }
        CHECK(rel_diff(r.out, out) < 1e-13);
        CHECK(rel_diff(r.lse, lse) < 1e-13);
    }
}

TEST_CASE("attention never mixes documents", "[kernels][attention]") {
    const Shape& s = kLong;
    const Inputs in = make_inputs(s, 102);
    const auto packed = run<double>(s, in);
    const auto cu = cu_seqlens_of(s.lengths);
    const int64_t qw = s.q_heads * s.head_dim, kvw = s.kv_heads * s.head_dim;
    for (size_t d = 0; d < s.lengths.size(); ++d) {
        const int64_t b = cu[d], e = cu[d + 1];
        const Shape alone{{s.lengths[d]}, s.q_heads, s.kv_heads, s.head_dim};
        const Inputs sub{rows_of(in.q, b, e, qw), rows_of(in.k, b, e, kvw),
                         rows_of(in.v, b, e, kvw), rows_of(in.dout, b, e, qw)};
        const auto r = run<double>(alone, sub);
        CHECK(rel_diff(r.out, rows_of(packed.out, b, e, qw)) < 1e-12);
        CHECK(rel_diff(r.lse, rows_of(packed.lse, b, e, s.q_heads)) < 1e-12);
        CHECK(rel_diff(r.dq, rows_of(packed.dq, b, e, qw)) < 1e-12);
        CHECK(rel_diff(r.dk, rows_of(packed.dk, b, e, kvw)) < 1e-12);
        CHECK(rel_diff(r.dv, rows_of(packed.dv, b, e, kvw)) < 1e-12);
    }
    // Perturb every input of the middle (one-token) document: only its own rows may move.
    Inputs changed = in;
    for (int64_t n = cu[1] * qw; n < cu[2] * qw; ++n) {
        changed.q[n] += 0.5;
    }
    for (int64_t n = cu[1] * kvw; n < cu[2] * kvw; ++n) {
        changed.k[n] -= 0.25;
        changed.v[n] += 1.0;
    }
    const auto r = run<double>(s, changed);
    for (int64_t t = 0; t < s.tokens(); ++t) {
        const bool own = t >= cu[1] && t < cu[2];
        for (int64_t n = t * qw; n < (t + 1) * qw; ++n) {
            if (own) {
                CHECK(r.out[n] != packed.out[n]);
            } else {
                REQUIRE(r.out[n] == packed.out[n]);
            }
        }
    }
}

TEST_CASE("attention backward matches finite differences", "[kernels][attention][fd]") {
    for (const Shape& s : {kGroup2, kGroup1, kGroup3}) {
        INFO("q_heads " << s.q_heads << " kv_heads " << s.kv_heads);
        Inputs in = make_inputs(s, 103);
        const auto cu = cu_seqlens_of(s.lengths);
        auto loss = [&] {
            Vec out(static_cast<size_t>(s.q_size()));
            Vec lse(static_cast<size_t>(s.tokens() * s.q_heads));
            attention_forward_ref(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(),
                                  cu.data(), static_cast<int64_t>(s.lengths.size()), s.q_heads,
                                  s.kv_heads, s.head_dim, s.scale());
            return dot(in.dout, out);
        };
        const auto r = run<double>(s, in);
        check_gradients("attention G=" + std::to_string(s.q_heads / s.kv_heads), loss,
                        {{"q", &in.q, r.dq}, {"k", &in.k, r.dk}, {"v", &in.v, r.dv}});
    }
}

TEST_CASE("attention float agrees with double", "[kernels][attention]") {
    for (const Shape& s : {kGroup3, kLong}) {
        const Inputs in = make_inputs(s, 104);
        const auto d = run<double>(s, in);
        const auto f = run<float>(s, in);
        CHECK(rel_diff(f.out, d.out) < 1e-5);
        CHECK(rel_diff(f.lse, d.lse) < 1e-5);
        CHECK(rel_diff(f.dq, d.dq) < 1e-5);
        CHECK(rel_diff(f.dk, d.dk) < 1e-5);
        CHECK(rel_diff(f.dv, d.dv) < 1e-5);
    }
}

template <typename T>
struct GateResult {
    std::vector<T> y, d_o, dgate;
};

template <typename T>
GateResult<T> run_gate(const Vec& o, const Vec& gate, const Vec& dy) {
    const auto n = static_cast<int64_t>(o.size());
    const auto ot = cast<T>(o), gt = cast<T>(gate), dyt = cast<T>(dy);
    GateResult<T> r{nans<T>(n), nans<T>(n), nans<T>(n)};
    output_gate_forward_ref(r.y.data(), ot.data(), gt.data(), n);
    output_gate_backward_ref(r.d_o.data(), r.dgate.data(), dyt.data(), ot.data(), gt.data(), n);
    return r;
}

TEST_CASE("output gate forward, FD gradients, float vs double", "[kernels][attention][fd]") {
    const int64_t n = 29;
    Rng rng(105);
    Vec o = rng.normal(n);
    Vec gate = rng.normal(n, 3.0);
    const Vec weights = rng.normal(n);
    const auto r = run_gate<double>(o, gate, weights);
    for (int64_t i = 0; i < n; ++i) {
        CHECK(r.y[i] == Approx(o[i] / (1.0 + std::exp(-gate[i]))).epsilon(1e-14));
    }
    auto loss = [&] {
        Vec y(static_cast<size_t>(n));
        output_gate_forward_ref(y.data(), o.data(), gate.data(), n);
        return dot(weights, y);
    };
    check_gradients("output_gate", loss, {{"o", &o, r.d_o}, {"gate", &gate, r.dgate}});
    const auto f = run_gate<float>(o, gate, weights);
    CHECK(rel_diff(f.y, r.y) < 1e-5);
    CHECK(rel_diff(f.d_o, r.d_o) < 1e-5);
    CHECK(rel_diff(f.dgate, r.dgate) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
