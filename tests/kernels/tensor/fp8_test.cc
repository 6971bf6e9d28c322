// FP8 quantisation: the reference's codes and scales on hand-checked values, its rounding error
// against fp64 within the formats' bounds on fresh random inputs, and the CUDA kernels equal to
// the reference bit for bit (codes and factors), both layouts, odd shapes, padding and a
// poisoned output ([cuda]: skipped with a printed reason where no GPU is present).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/bf16_bits.h"
#include "kernels/tensor/fp8.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

constexpr Fp8Format kE4M3 = Fp8Format::kE4M3, kE5M2 = Fp8Format::kE5M2;

TEST_CASE("fp8 reference: codes, rounding and saturation", "[kernels]") {
    CHECK(fp8_max(kE4M3) == 448.0);
    CHECK(fp8_max(kE5M2) == 57344.0);
    CHECK(fp8_decode_ref(0x38, kE4M3) == 1.0);
    CHECK(fp8_decode_ref(0x01, kE4M3) == std::ldexp(1.0, -9));  // smallest subnormal
    CHECK(fp8_decode_ref(0x08, kE4M3) == std::ldexp(1.0, -6));  // smallest normal
    CHECK(fp8_decode_ref(0xB8, kE4M3) == -1.0);
    CHECK(std::isnan(fp8_decode_ref(0x7F, kE4M3)));
    CHECK(fp8_decode_ref(0x3C, kE5M2) == 1.0);
    CHECK(fp8_decode_ref(0x01, kE5M2) == std::ldexp(1.0, -16));
    // Ties go to the even code: 1.0625 is halfway between 1 (0x38) and 1.125 (0x39).
    CHECK(fp8_encode_ref(1.0625, kE4M3) == 0x38);
    CHECK(fp8_encode_ref(1.1875, kE4M3) == 0x3A);  // halfway between 0x39 and 0x3A
    CHECK(fp8_encode_ref(1.07, kE4M3) == 0x39);
    CHECK(fp8_encode_ref(1e6, kE4M3) == 0x7E);  // saturates to the largest finite
    CHECK(fp8_encode_ref(-1e9, kE5M2) == 0xFB);
    CHECK(fp8_encode_ref(-1e-30, kE4M3) == 0x80);  // the sign survives underflow
    // Every finite code reads back to itself.
    for (const Fp8Format f : {kE4M3, kE5M2}) {
        for (int c = 0; c < 256; ++c) {
            const double v = fp8_decode_ref(static_cast<uint8_t>(c), f);
            if (!std::isnan(v)) CHECK(fp8_encode_ref(v, f) == c);
        }
    }
}

TEST_CASE("fp8 dequantisation factors: the largest power of two that fits", "[kernels]") {
    CHECK(fp8_dequant_factor(448.0f, kE4M3) == 1.0f);
    CHECK(fp8_dequant_factor(449.0f, kE4M3) == 2.0f);
    CHECK(fp8_dequant_factor(1.0f, kE4M3) == std::ldexp(1.0f, -8));  // 256 <= 448 < 512
    CHECK(fp8_dequant_factor(1.75f, kE4M3) == std::ldexp(1.0f, -8));
    CHECK(fp8_dequant_factor(1.76f, kE4M3) == std::ldexp(1.0f, -7));
    CHECK(fp8_dequant_factor(57344.0f, kE5M2) == 1.0f);
    CHECK(fp8_dequant_factor(0.0f, kE4M3) == 1.0f);
    CHECK(fp8_dequant_factor(1e-45f, kE4M3) == std::ldexp(1.0f, -126));  // clamped
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> log2(-30.0f, 30.0f);
    for (int i = 0; i < 1000; ++i) {
        const float amax = std::exp2(log2(rng));
        for (const Fp8Format f : {kE4M3, kE5M2}) {
            const double scaled = amax / fp8_dequant_factor(amax, f);
            CHECK(scaled <= fp8_max(f));
            CHECK(scaled > fp8_max(f) / 2);
        }
    }
}

// Rows of varied magnitude (some tiny, one zero) so rows use different factors.
std::vector<uint16_t> varied_rows(int64_t rows, int64_t cols, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> log2(-20.0f, 12.0f);
    std::vector<uint16_t> bits(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float scale = r == 3 ? 0.0f : std::exp2(log2(rng));
        for (int64_t c = 0; c < cols; ++c) {
            bits[static_cast<size_t>(r * cols + c)] = float_to_bf16_bits(normal(rng) * scale);
        }
    }
    return bits;
}

TEST_CASE("fp8 quantisation error within the format's bound against fp64", "[kernels]") {
    std::mt19937 rng(7);
    const int64_t rows = 40, cols = 301;
    const std::vector<uint16_t> in = varied_rows(rows, cols, rng);
    for (const Fp8Format f : {kE4M3, kE5M2}) {
        // Half a unit in the last place: 2^-4 (e4m3) or 2^-3 (e5m2) of a normal value; below the
        // smallest normal, half the subnormal step.
        const int mantissa = f == kE4M3 ? 3 : 2;
        const double min_normal = f == kE4M3 ? std::ldexp(1.0, -6) : std::ldexp(1.0, -14);
        const double half_sub = min_normal * std::ldexp(1.0, -mantissa - 1);
        std::vector<uint8_t> q(in.size());
        std::vector<float> d(static_cast<size_t>(rows));
        quantize_rows_fp8_ref(q.data(), d.data(), in.data(), rows, cols, f);
        double worst = 0;
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
                const size_t i = static_cast<size_t>(r * cols + c);
                const double x = bf16_bits_to_float(in[i]) / static_cast<double>(d[r]);
                const double err = std::fabs(fp8_decode_ref(q[i], f) - x);
                const double bound =
                    std::fabs(x) >= min_normal ? std::ldexp(std::fabs(x), -mantissa - 1) : half_sub;
                worst = std::max(worst, err / bound);
            }
        }
        INFO("format " << (f == kE4M3 ? "e4m3" : "e5m2") << ", worst error / bound " << worst);
        CHECK(worst <= 1.0);
        CHECK(worst > 0.5);  // the rounding is really exercised
    }
}

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

TEST_CASE("quantize_rows_fp8 matches the reference bit for bit", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(13);
    // 5120: the vector path; 301: the scalar path; 8 with a misaligned input.
    for (const int64_t cols : {int64_t{5120}, int64_t{301}, int64_t{8}}) {
        for (const Fp8Format f : {kE4M3, kE5M2}) {
            const int64_t rows = 37;
            const bool offset = cols == 8;
            std::vector<uint16_t> in = varied_rows(rows + 1, cols, rng);
            DeviceBuffer<uint16_t> d_in(in);
            DeviceBuffer<uint8_t> d_out(static_cast<size_t>(rows * cols));
            DeviceBuffer<float> d_scale(static_cast<size_t>(rows));
            d_out.poison();
            d_scale.poison();
            INFO("cols " << cols << ", " << (f == kE4M3 ? "e4m3" : "e5m2"));
            REQUIRE(quantize_rows_fp8(d_out.get(), d_scale.get(), bf16_ptr(d_in) + (offset ? 1 : 0),
                                      rows, cols, f, nullptr) == cudaSuccess);
            std::vector<uint8_t> want(static_cast<size_t>(rows * cols));
            std::vector<float> want_scale(static_cast<size_t>(rows));
            quantize_rows_fp8_ref(want.data(), want_scale.data(), in.data() + (offset ? 1 : 0),
                                  rows, cols, f);
            CHECK(d_out.download() == want);
            CHECK(d_scale.download() == want_scale);
        }
    }
}

TEST_CASE("quantize_transposed_fp8 matches the reference bit for bit, padding zeroed",
          "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(17);
    struct Case {
        int64_t rows, cols, ld;
    };
    // Token counts that are not multiples of 16 or of the tile, a wide and a narrow matrix.
    for (const Case k : {Case{300, 70, 304}, Case{1000, 5120, 1008}, Case{64, 3, 80}}) {
        for (const Fp8Format f : {kE4M3, kE5M2}) {
            const std::vector<uint16_t> in = varied_rows(k.rows, k.cols, rng);
            DeviceBuffer<uint16_t> d_in(in);
            DeviceBuffer<uint8_t> d_out(static_cast<size_t>(k.cols * k.ld));
            DeviceBuffer<float> d_scale(static_cast<size_t>(k.cols)),
                scratch(static_cast<size_t>(k.cols));
            d_out.poison();
            d_scale.poison();
            scratch.poison();
            INFO("rows " << k.rows << ", cols " << k.cols << ", ld " << k.ld);
            REQUIRE(quantize_transposed_fp8(d_out.get(), d_scale.get(), scratch.get(),
                                            bf16_ptr(d_in), k.rows, k.cols, k.ld, f,
                                            nullptr) == cudaSuccess);
            std::vector<uint8_t> want(static_cast<size_t>(k.cols * k.ld));
            std::vector<float> want_scale(static_cast<size_t>(k.cols));
            quantize_transposed_fp8_ref(want.data(), want_scale.data(), in.data(), k.rows, k.cols,
                                        k.ld, f);
            CHECK(d_out.download() == want);
            CHECK(d_scale.download() == want_scale);
        }
    }
    DeviceBuffer<uint8_t> out(64);
    DeviceBuffer<float> s(4);
    DeviceBuffer<uint16_t> in(64);
    CHECK(quantize_transposed_fp8(out.get(), s.get(), s.get(), bf16_ptr(in), 16, 4, 20, kE4M3,
                                  nullptr) == cudaErrorInvalidValue);  // ld not a multiple of 16
}
#else
TEST_CASE("quantize_rows_fp8 matches the reference bit for bit", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
