// Tests of the varlen causal depthwise conv1d + SiLU reference: a zero-padded per-document
// convolution, document isolation (documents shorter than K included), FD gradients, float vs
// double.
#include "kernels/gdn/causal_conv1d.h"

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

constexpr int64_t kChannels = 7;
constexpr int64_t kKernel = 4;

template <typename T>
struct Result {
    std::vector<T> out, dx, dw;
};

template <typename T>
Result<T> run(const std::vector<int32_t>& lengths, const Vec& x, const Vec& w, const Vec& dout,
              const Vec& dw0) {
    const auto cu = cu_seqlens_of(lengths);
    const auto num_docs = static_cast<int64_t>(lengths.size());
    const auto xt = cast<T>(x), wt = cast<T>(w), dt = cast<T>(dout);
    Result<T> r{nans<T>(cu.back() * kChannels), nans<T>(cu.back() * kChannels), cast<T>(dw0)};
    causal_conv1d_forward_ref(r.out.data(), xt.data(), wt.data(), cu.data(), num_docs, kChannels,
                              kKernel);
    causal_conv1d_backward_ref(r.dx.data(), r.dw.data(), dt.data(), xt.data(), wt.data(), cu.data(),
                               num_docs, kChannels, kKernel);
    return r;
}

const std::vector<int32_t> kShort = {1, 3, 7, 2};  // three documents shorter than K
const std::vector<int32_t> kLong = {5, 2, 70, 1};

TEST_CASE("causal_conv1d forward equals a zero-padded convolution per document",
          "[kernels][causal_conv1d]") {
    Rng rng(111);
    const auto cu = cu_seqlens_of(kShort);
    const Vec x = rng.normal(cu.back() * kChannels);
    const Vec w = rng.normal(kChannels * kKernel);
    const auto r = run<double>(kShort, x, w, x, w);
    for (size_t d = 0; d + 1 < cu.size(); ++d) {
        // What HF does per sequence: K-1 zeros in front, then a plain 'valid' correlation.
        const int64_t len = cu[d + 1] - cu[d];
        Vec padded(static_cast<size_t>((len + kKernel - 1) * kChannels), 0.0);
        for (int64_t n = 0; n < len * kChannels; ++n) {
            padded[(kKernel - 1) * kChannels + n] = x[cu[d] * kChannels + n];
        }
        for (int64_t t = 0; t < len; ++t) {
            for (int64_t c = 0; c < kChannels; ++c) {
                double pre = 0;
                for (int64_t j = 0; j < kKernel; ++j) {
                    pre += w[c * kKernel + j] * padded[(t + j) * kChannels + c];
                }
                const double expected = pre / (1.0 + std::exp(-pre));
                CHECK(r.out[(cu[d] + t) * kChannels + c] == Approx(expected).epsilon(1e-14));
            }
        }
    }
}

TEST_CASE("causal_conv1d never mixes documents", "[kernels][causal_conv1d]") {
    for (const auto& lengths : {kShort, kLong}) {
        Rng rng(112);
        const auto cu = cu_seqlens_of(lengths);
        const Vec x = rng.normal(cu.back() * kChannels);
        const Vec w = rng.normal(kChannels * kKernel);
        const Vec dout = rng.normal(cu.back() * kChannels);
        const Vec zeros(static_cast<size_t>(kChannels * kKernel), 0.0);
        const auto packed = run<double>(lengths, x, w, dout, zeros);
        Vec dw_sum = zeros;
        for (size_t d = 0; d < lengths.size(); ++d) {
            const int64_t b = cu[d], e = cu[d + 1];
            const auto r = run<double>({lengths[d]}, rows_of(x, b, e, kChannels), w,
                                       rows_of(dout, b, e, kChannels), zeros);
            CHECK(rel_diff(r.out, rows_of(packed.out, b, e, kChannels)) < 1e-12);
            CHECK(rel_diff(r.dx, rows_of(packed.dx, b, e, kChannels)) < 1e-12);
            for (size_t n = 0; n < dw_sum.size(); ++n) {
                dw_sum[n] += r.dw[n];
            }
        }
        CHECK(rel_diff(packed.dw, dw_sum) < 1e-12);

        // Changing document 1 must leave every other document's output bit-identical.
        Vec changed = x;
        for (int64_t n = cu[1] * kChannels; n < cu[2] * kChannels; ++n) {
            changed[n] += 1.0;
        }
        const auto r = run<double>(lengths, changed, w, dout, zeros);
        for (int64_t n = 0; n < cu.back() * kChannels; ++n) {
            const bool own = n >= cu[1] * kChannels && n < cu[2] * kChannels;
            if (own) {
                CHECK(r.out[n] != packed.out[n]);
            } else {
                REQUIRE(r.out[n] == packed.out[n]);
            }
        }
    }
}

TEST_CASE("causal_conv1d backward matches finite differences", "[kernels][causal_conv1d][fd]") {
    Rng rng(113);
    const auto cu = cu_seqlens_of(kShort);
    Vec x = rng.normal(cu.back() * kChannels);
    Vec w = rng.normal(kChannels * kKernel, 0.7);
    const Vec weights = rng.normal(cu.back() * kChannels);
    const Vec dw0 = rng.normal(kChannels * kKernel);
    auto loss = [&] {
        Vec out(static_cast<size_t>(cu.back() * kChannels));
        causal_conv1d_forward_ref(out.data(), x.data(), w.data(), cu.data(),
                                  static_cast<int64_t>(kShort.size()), kChannels, kKernel);
        return dot(weights, out);
    };
    const auto r = run<double>(kShort, x, w, weights, dw0);
    check_gradients("causal_conv1d", loss, {{"x", &x, r.dx}, {"w", &w, minus(r.dw, dw0)}});
}

TEST_CASE("causal_conv1d float agrees with double", "[kernels][causal_conv1d]") {
    Rng rng(114);
    const auto cu = cu_seqlens_of(kLong);
    const Vec x = rng.normal(cu.back() * kChannels);
    const Vec w = rng.normal(kChannels * kKernel, 0.7);
    const Vec dout = rng.normal(cu.back() * kChannels);
    const Vec zeros(static_cast<size_t>(kChannels * kKernel), 0.0);
    const auto d = run<double>(kLong, x, w, dout, zeros);
    const auto f = run<float>(kLong, x, w, dout, zeros);
    CHECK(rel_diff(f.out, d.out) < 1e-5);
    CHECK(rel_diff(f.dx, d.dx) < 1e-5);
    CHECK(rel_diff(f.dw, d.dw) < 1e-5);
}

}  // namespace
}  // namespace deltatune::test
