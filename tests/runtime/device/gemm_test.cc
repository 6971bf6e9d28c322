// The cuBLASLt GEMM runner (runtime/device/gemm.h) against an fp64 host reference, in the three
// forms of a linear layer, with the heuristic's first algorithm (the default) and with candidates
// timed (DELTATUNE_GEMM=timed): the first call of a shape times every candidate, an accumulating
// call (beta 1) must still add exactly once, and a shape within 12.5% of a timed one reuses its
// choice. [cuda]: skipped with
// a printed reason where no GPU is present.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "runtime/device/gemm.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

// C (m, n) = beta C + op(A) op(B) on the host, operands row-major as GemmArgs describes them.
std::vector<float> reference(const std::vector<float>& a, bool trans_a, const std::vector<float>& b,
                             bool trans_b, std::vector<float> c, int64_t m, int64_t n, int64_t k,
                             float beta) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t p = 0; p < k; ++p) {
                const float av =
                    trans_a ? a[static_cast<size_t>(p * m + i)] : a[static_cast<size_t>(i * k + p)];
                const float bv =
                    trans_b ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * n + j)];
                s += static_cast<double>(av) * bv;
            }
            float& out = c[static_cast<size_t>(i * n + j)];
            out = static_cast<float>(s + (beta != 0 ? static_cast<double>(out) : 0.0));
        }
    }
    return c;
}

struct Shape {
    int64_t rows, in, out;
};

void check_linear_forms(Gemm& g, const Shape& s, std::mt19937& rng) {
    const size_t xn = static_cast<size_t>(s.rows * s.in), wn = static_cast<size_t>(s.in * s.out),
                 yn = static_cast<size_t>(s.rows * s.out);
    const Bf16Data x = random_bf16(xn, rng), w = random_bf16(wn, rng, 0.05f),
                   dy = random_bf16(yn, rng), dx0 = random_bf16(xn, rng);
    const std::vector<float> dw0 = random_f32(wn, rng);
    DeviceBuffer<uint16_t> dx_(x.bits), dw_(w.bits), ddy(dy.bits), y(yn), dx(dx0.bits);
    DeviceBuffer<float> dw(dw0);
    y.poison();
    INFO("rows " << s.rows << ", in " << s.in << ", out " << s.out);
    // y = x W^T (bf16 out).
    REQUIRE(linear_forward(g, y.get(), dx_.get(), dw_.get(), s.rows, s.in, s.out, nullptr).ok());
    const auto y_ref =
        reference(x.f, false, w.f, true, std::vector<float>(yn), s.rows, s.out, s.in, 0.0f);
    CHECK(rel_err(to_float(y.download()), y_ref) < 4e-3);
    // dx += dy W (bf16, accumulated into random contents).
    REQUIRE(
        linear_backward_dx(g, dx.get(), ddy.get(), dw_.get(), s.rows, s.in, s.out, true, nullptr)
            .ok());
    const auto dx_ref = reference(dy.f, false, w.f, false, dx0.f, s.rows, s.in, s.out, 1.0f);
    CHECK(rel_err(to_float(dx.download()), dx_ref) < 4e-3);
    // dW += dy^T x (fp32, accumulated): an extra add from the timing runs would be far outside.
    REQUIRE(
        linear_backward_dw(g, dw.get(), ddy.get(), dx_.get(), s.rows, s.in, s.out, nullptr).ok());
    const auto dw_ref = reference(dy.f, true, x.f, false, dw0, s.out, s.in, s.rows, 1.0f);
    CHECK(rel_err(dw.download(), dw_ref) < 1e-5);
}

TEST_CASE("cuBLASLt GEMMs: forward, dx and dW forms match fp64, candidates timed or not",
          "[runtime][cuda]") {
    if (!have_gpu()) return;
    DeviceBuffer<char> workspace(size_t{32} << 20);
    std::mt19937 rng(20261201);
    // A tile-sized problem, one whose dimensions are not multiples of any tile, a single row.
    const Shape shapes[] = {{512, 384, 640}, {77, 136, 200}, {1, 256, 96}};
    for (const bool timed : {true, false}) {
        INFO((timed ? "timed" : "heuristic"));
        auto g = Gemm::create(workspace.get(), workspace.size(), timed);
        REQUIRE(g.ok());
        for (const Shape& s : shapes) check_linear_forms(**g, s, rng);
        CHECK((*g)->cached_algorithms() == 9);  // three shapes, three forms
        // Second calls reuse the cached choice (and still add exactly once).
        check_linear_forms(**g, shapes[0], rng);
        CHECK((*g)->cached_algorithms() == 9);
        // Timing happened (at most once per shape; one offered candidate needs none), or never.
        const size_t buckets = (*g)->timed_buckets();
        CHECK(buckets <= 9);
        if (timed) CHECK(buckets > 0);
        if (!timed) CHECK((buckets == 0 && (*g)->retuned_algorithms() == 0));
        // 500 rows share 512's bucket (a batch's token count varies): no new timing.
        check_linear_forms(**g, {500, 384, 640}, rng);
        CHECK((*g)->cached_algorithms() == 12);
        CHECK((*g)->timed_buckets() == buckets);
    }
}
#endif

}  // namespace
}  // namespace deltatune
