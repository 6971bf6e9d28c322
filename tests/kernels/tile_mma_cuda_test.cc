// The tensor-core tile products of the gated delta rule's chunk kernels (mm and mm_bf16,
// kernels/common/tile_mma.cuh) against an fp64 product of the same operands (tf32-rounded for
// mm; bf16 values for mm_bf16), for each operand layout, both warp tilings,
// tf32-flagged operands and a tf32-rounded C; beta reads C back and the padding between rows
// stays untouched. Operands flagged as tf32 must give the same bits as the same values
// converted in the product ([cuda]).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/bf16_bits.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/tile_mma_probe.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

uint32_t bits_of(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof(u));
    return u;
}

// cvt.rna.tf32.f32: round to 10 significand bits, ties away from zero (finite inputs).
float tf32(float x) {
    const uint32_t u = (bits_of(x) + 0x1000u) & 0xffffe000u;
    float r;
    std::memcpy(&r, &u, sizeof(r));
    return r;
}

struct Operands {
    std::vector<float> a, b, c;
};

Operands random_operands(const TileMmaCase& x, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Operands o{std::vector<float>(static_cast<size_t>(stored_a(x))),
               std::vector<float>(static_cast<size_t>(stored_b(x))),
               std::vector<float>(static_cast<size_t>(stored_c(x)))};
    auto value = [&](bool bf16, bool tf32_exact) {
        const float v = u(rng);
        if (bf16) return bf16_bits_to_float(float_to_bf16_bits(v));
        return tf32_exact ? tf32(v) : v;
    };
    for (float& v : o.a) v = value(x.operands != kFp32Operands, (x.op_a & 2) != 0);
    for (float& v : o.b) v = value(x.operands == kBf16Operands, (x.op_b & 2) != 0);
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
    const int operands = kTileMmaCases[index].operands;
    DeviceBuffer<uint16_t> a16(operands != kFp32Operands ? to_bf16_bits(o.a)
                                                         : std::vector<uint16_t>{});
    DeviceBuffer<uint16_t> b16(operands == kBf16Operands ? to_bf16_bits(o.b)
                                                         : std::vector<uint16_t>{});
    DeviceBuffer<float> a32(operands == kFp32Operands ? o.a : std::vector<float>{});
    DeviceBuffer<float> b32(operands != kBf16Operands ? o.b : std::vector<float>{});
    const void* a = operands != kFp32Operands ? static_cast<const void*>(a16.get()) : a32.get();
    const void* b = operands == kBf16Operands ? static_cast<const void*>(b16.get()) : b32.get();
    REQUIRE(run_tile_mma_case(index, a, b, c.get(), alpha, beta) == cudaSuccess);
    return c.download();
}

TEST_CASE("tile products match an fp64 product of the operands as the tensor cores see them",
          "[cuda]") {
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
                    acc += static_cast<double>(tf32(av)) * tf32(bv);
                    mag += std::fabs(static_cast<double>(av) * bv);
                }
                const double want = alpha * acc + beta * static_cast<double>(o.c[at]);
                // fp32 accumulation over k, plus the rounding of C to tf32 where asked.
                double tol = 4e-6 * (std::fabs(alpha) * mag + std::fabs(beta * o.c[at])) + 1e-7;
                if (x.round_c) {
                    REQUIRE((bits_of(got[at]) & 0x1fffu) == 0u);
                    tol += std::ldexp(std::fabs(want), -10);
                }
                const double err = std::fabs(got[at] - want);
                worst = std::max(worst, err / (tol > 0 ? tol : 1.0));
                REQUIRE(err <= tol);
            }
        }
        noted(std::string("tile_mma worst err / tol, ") + x.name, worst);
    }
}

TEST_CASE("tf32-flagged operands give the bits the converted values give", "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(7);
    // Cases 1 and 5: the same shape and tiling, without and with the tf32 flags.
    REQUIRE(kTileMmaCases[1].op_a == 0);
    REQUIRE(kTileMmaCases[5].op_a == 2);
    Operands o = random_operands(kTileMmaCases[5], rng);  // operands already tf32
    const std::vector<float> converted = run(1, o, 1.0f, 0.0f);
    const std::vector<float> flagged = run(5, o, 1.0f, 0.0f);
    for (size_t i = 0; i < converted.size(); ++i)
        REQUIRE(bits_of(converted[i]) == bits_of(flagged[i]));
}
#endif

}  // namespace
}  // namespace deltatune
