// bf16 / fp16 conversion: round to nearest even, NaN kept, overflow and subnormals.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/tensor/dtype.h"
#include "runtime/tensor/tensor.h"

namespace deltatune {
namespace {

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

TEST_CASE("bf16 rounds to nearest, ties to even", "[tensor]") {
    CHECK(float_to_bf16_bits(1.0f) == 0x3f80);
    // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to the even mantissa (1.0).
    CHECK(float_to_bf16_bits(from_bits(0x3f808000u)) == 0x3f80);
    // 1 + 3*2^-8 is halfway between 0x3f81 and 0x3f82: ties to even (0x3f82).
    CHECK(float_to_bf16_bits(from_bits(0x3f818000u)) == 0x3f82);
    // Just above halfway rounds up, just below rounds down.
    CHECK(float_to_bf16_bits(from_bits(0x3f808001u)) == 0x3f81);
    CHECK(float_to_bf16_bits(from_bits(0x3f807fffu)) == 0x3f80);
    CHECK(float_to_bf16_bits(-2.5f) == 0xc020);
    // The largest finite float rounds to infinity; infinities stay infinite.
    CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);
    CHECK(float_to_bf16_bits(-std::numeric_limits<float>::infinity()) == 0xff80);
}

TEST_CASE("bf16 keeps NaN, including NaNs whose payload is only in the low bits", "[tensor]") {
    CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
    CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(from_bits(0x7f800001u)))));
    CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(from_bits(0xffffffffu)))));
}

TEST_CASE("bf16 round trip is exact for every bf16 value", "[tensor]") {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = bf16_bits_to_float(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        REQUIRE(float_to_bf16_bits(f) == h);
    }
}

TEST_CASE("fp16 conversion: exact values, rounding, subnormals, overflow, NaN", "[tensor]") {
    CHECK(float_to_f16_bits(1.0f) == 0x3c00);
    CHECK(float_to_f16_bits(65504.0f) == 0x7bff);
    CHECK(float_to_f16_bits(65520.0f) == 0x7c00);  // halfway to the next binade: infinity
    CHECK(float_to_f16_bits(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
    CHECK(float_to_f16_bits(std::ldexp(1.0f, -25)) == 0x0000);  // halfway, ties to even (0)
    CHECK(float_to_f16_bits(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 ulp, ties to even (2)
    CHECK(std::isnan(f16_bits_to_float(float_to_f16_bits(std::nanf("")))));
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = f16_bits_to_float(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        REQUIRE(float_to_f16_bits(f) == h);
    }
}

TEST_CASE("tensor views, narrow and dtype conversion", "[tensor]") {
    Tensor t = Tensor::cpu_from({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
    Tensor col = t.narrow(1, 1, 2);
    CHECK_FALSE(col.is_contiguous());
    Tensor c = col.contiguous();
    CHECK(c.shape() == std::vector<int64_t>{2, 2});
    CHECK(std::vector<float>(c.data<float>(), c.data<float>() + 4) ==
          std::vector<float>{2, 3, 5, 6});
    auto bf = t.to_dtype(DType::kBF16);
    REQUIRE(bf.ok());
    auto back = bf->to_dtype(DType::kF32);
    REQUIRE(back.ok());
    CHECK(back->data<float>()[5] == 6.0f);
    CHECK_FALSE(t.to_dtype(DType::kI32).ok());
}

}  // namespace
}  // namespace deltatune
