// The tensor-core tile products of the gated delta rule's chunk kernels (mm_bf16,
// kernels/common/tile_mma.cuh) against an fp64 product of the same bf16 operands, for each
// operand layout and both warp tilings; beta reads C back and the padding between rows stays
// untouched ([cuda]).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/bf16_bits.h"
#include "tests/kernels/common/cuda_test_util.h"
#include "tests/kernels/common/tile_mma_probe.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

uint32_t bits_of(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof(u));
    return u;
}

struct Operands {
    std::vector<float> a, b, c;
};

Operands random_operands(const TileMmaCase& x, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Operands o{std::vector<float>(static_cast<size_t>(stored_a(x))),
               std::vector<float>(static_cast<size_t>(stored_b(x))),
               std::vector<float>(static_cast<size_t>(stored_c(x)))};
    auto bf16_value = [&] { return bf16_bits_to_float(float_to_bf16_bits(u(rng))); };
    for (float& v : o.a) v = bf16_value();
    for (float& v : o.b) v = bf16_value();
    for (float& v : o.c) v = u(rng);
    return o;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = float_to_bf16_bits(v[i]);
    return bits;
}

std::vector<float> run(int index, const Operands& o, float alpha, float beta) {
    DeviceBuffer<float> c(o.c);
    DeviceBuffer<uint16_t> a(to_bf16_bits(o.a));
    DeviceBuffer<uint16_t> b(to_bf16_bits(o.b));
    REQUIRE(run_tile_mma_case(index, a.get(), b.get(), c.get(), alpha, beta) == cudaSuccess);
    return c.download();
}

TEST_CASE("bf16 tile products match an fp64 product of the operands", "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(2026);
    const float alpha = -0.75f, beta = 0.5f;
    for (int index = 0; index < kTileMmaCaseCount; ++index) {
        const TileMmaCase& x = kTileMmaCases[index];
        CAPTURE(x.name);
        const Operands o = random_operands(x, rng);
        const std::vector<float> got = run(index, o, alpha, beta);
        double worst = 0.0;
        for (int i = 0; i < x.m; ++i) {
            for (int j = 0; j < x.ldc; ++j) {
                const size_t at = static_cast<size_t>(i) * x.ldc + j;
                if (j >= x.n) {  // padding: never written
                    REQUIRE(bits_of(got[at]) == bits_of(o.c[at]));
                    continue;
                }
                double acc = 0.0, mag = 0.0;
                for (int k = 0; k < x.k; ++k) {
                    const float av = (x.op_a & 1) ? o.a[static_cast<size_t>(k) * x.lda + i]
                                                  : o.a[static_cast<size_t>(i) * x.lda + k];
                    const float bv = (x.op_b & 1) ? o.b[static_cast<size_t>(j) * x.ldb + k]
                                                  : o.b[static_cast<size_t>(k) * x.ldb + j];
                    acc += static_cast<double>(av) * bv;
                    mag += std::fabs(static_cast<double>(av) * bv);
                }
                const double want = alpha * acc + beta * static_cast<double>(o.c[at]);
                // fp32 accumulation over k (bf16 products are exact in fp32).
                const double tol =
                    4e-6 * (std::fabs(alpha) * mag + std::fabs(beta * o.c[at])) + 1e-7;
                const double err = std::fabs(got[at] - want);
                worst = std::max(worst, err / (tol > 0 ? tol : 1.0));
                REQUIRE(err <= tol);
            }
        }
        noted(std::string("tile_mma worst err / tol, ") + x.name, worst);
    }
}

#endif

}  // namespace
}  // namespace deltatune
