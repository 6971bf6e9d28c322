// CPU references of the FP8 quantisation: the formats decoded from their bit fields, encoding by
// search over the codes (no float tricks to trust), the scales chosen by exact exponent
// arithmetic.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/bf16_bits.h"
#include "kernels/tensor/fp8.h"

namespace deltatune {

namespace {

// Exponent and mantissa widths, exponent bias, and the largest finite code of the two formats.
struct Layout {
    int mantissa_bits, bias;
    uint8_t max_code;
};

Layout layout_of(Fp8Format f) {
    return f == Fp8Format::kE4M3 ? Layout{3, 7, 0x7E} : Layout{2, 15, 0x7B};
}

// The magnitude of a non-negative code (sign bit clear), subnormals included.
double magnitude(uint8_t code, const Layout& l) {
    const int m = code & ((1 << l.mantissa_bits) - 1);
    const int e = code >> l.mantissa_bits;
    const double frac = static_cast<double>(m) / (1 << l.mantissa_bits);
    return e == 0 ? std::ldexp(frac, 1 - l.bias) : std::ldexp(1.0 + frac, e - l.bias);
}

// Every finite non-negative magnitude, ascending, indexed by code.
const std::vector<double>& magnitudes(Fp8Format f) {
    static const auto table = [](Fp8Format g) {
        const Layout l = layout_of(g);
        std::vector<double> v;
        for (int c = 0; c <= l.max_code; ++c) v.push_back(magnitude(static_cast<uint8_t>(c), l));
        return v;
    };
    static const std::vector<double> e4m3 = table(Fp8Format::kE4M3), e5m2 = table(Fp8Format::kE5M2);
    return f == Fp8Format::kE4M3 ? e4m3 : e5m2;
}

}  // namespace

double fp8_max(Fp8Format f) {
    return magnitude(layout_of(f).max_code, layout_of(f));
}

uint8_t fp8_encode_ref(double x, Fp8Format f) {
    const Layout l = layout_of(f);
    if (std::isnan(x)) return 0x7F;
    const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    const double a = std::fabs(x);
    const std::vector<double>& v = magnitudes(f);
    if (a >= v.back()) return sign | l.max_code;
    // The largest code not above a (v[0] = 0 <= a < v.back()).
    const auto lo = static_cast<uint8_t>(std::upper_bound(v.begin(), v.end(), a) - v.begin() - 1);
    const double below = a - v[lo];
    const double above = v[lo + 1] - a;
    const bool up = above < below || (above == below && (lo & 1) != 0);
    return sign | static_cast<uint8_t>(up ? lo + 1 : lo);
}

double fp8_decode_ref(uint8_t code, Fp8Format f) {
    const Layout l = layout_of(f);
    const uint8_t mag = code & 0x7F;
    if (mag > l.max_code) return std::nan("");  // e4m3: 0x7F; e5m2: infinities read as NaN too
    const double v = magnitude(mag, l);
    return (code & 0x80) != 0 ? -v : v;
}

void quantize_rows_fp8_ref(uint8_t* out, float* dequant, const uint16_t* in, int64_t rows,
                           int64_t cols, Fp8Format f) {
    for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* row = in + r * cols;
        float amax = 0.0f;
        for (int64_t c = 0; c < cols; ++c)
            amax = std::max(amax, std::fabs(bf16_bits_to_float(row[c])));
        const float d = fp8_dequant_factor(amax, f);
        dequant[r] = d;
        for (int64_t c = 0; c < cols; ++c) {
            out[r * cols + c] =
                fp8_encode_ref(static_cast<double>(bf16_bits_to_float(row[c])) / d, f);
        }
    }
}

void quantize_transposed_fp8_ref(uint8_t* out, float* dequant, const uint16_t* in, int64_t rows,
                                 int64_t cols, int64_t ld, Fp8Format f) {
    std::vector<float> amax(static_cast<size_t>(cols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            amax[c] = std::max(amax[c], std::fabs(bf16_bits_to_float(in[r * cols + c])));
        }
    }
    for (int64_t c = 0; c < cols; ++c) {
        const float d = fp8_dequant_factor(amax[c], f);
        dequant[c] = d;
        for (int64_t r = 0; r < ld; ++r) {
            out[c * ld + r] =
                r < rows ? fp8_encode_ref(
                               static_cast<double>(bf16_bits_to_float(in[r * cols + c])) / d, f)
                         : 0;
        }
    }
}

}  // namespace deltatune
