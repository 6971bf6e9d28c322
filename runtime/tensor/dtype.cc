// DType names and the fp32 <-> fp16 conversions (bf16 is inline in the header).
#include "runtime/tensor/dtype.h"

#include <cmath>

namespace deltatune {

size_t dtype_size(DType t) {
    switch (t) {
        case DType::kBF16:
        case DType::kF16:
            return 2;
        case DType::kF32:
        case DType::kI32:
            return 4;
        case DType::kI64:
            return 8;
    }
    return 0;
}

const char* dtype_name(DType t) {
    switch (t) {
        case DType::kBF16:
            return "BF16";
        case DType::kF16:
            return "F16";
        case DType::kF32:
            return "F32";
        case DType::kI32:
            return "I32";
        case DType::kI64:
            return "I64";
    }
    return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
    if (name == "BF16") return DType::kBF16;
    if (name == "F16") return DType::kF16;
    if (name == "F32") return DType::kF32;
    if (name == "I32") return DType::kI32;
    if (name == "I64") return DType::kI64;
    return std::nullopt;
}

uint16_t float_to_f16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x3ffu);
    if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
    if (abs < 0x38800000u) {
        // Result is subnormal (or zero): value = m * 2^-24 with m rounded to nearest even.
        if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
        const uint32_t exp = abs >> 23;
        const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - exp;  // 113 - exp + 13
        uint32_t m = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (m & 1u))) ++m;
        return sign | static_cast<uint16_t>(m);
    }
    uint32_t v = abs - 0x38000000u;  // rebias exponent 127 -> 15
    const uint32_t lsb = (v >> 13) & 1u;
    v += 0xfffu + lsb;
    return sign | static_cast<uint16_t>(v >> 13);
}

float f16_bits_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        const float v = std::ldexp(static_cast<float>(mant), -24);
        std::memcpy(&u, &v, sizeof u);
        u |= sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

void float_span_to_f32(DType from, const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    switch (from) {
        case DType::kF32:
            std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
            return;
        case DType::kBF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(h[i]);
            return;
        case DType::kF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = f16_bits_to_float(h[i]);
            return;
        default:
            return;  // not a float type: callers check is_float_dtype
    }
}

void f32_to_float_span(DType to, const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    switch (to) {
        case DType::kF32:
            std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
            return;
        case DType::kBF16:
            for (int64_t i = 0; i < n; ++i) h[i] = float_to_bf16_bits(src[i]);
            return;
        case DType::kF16:
            for (int64_t i = 0; i < n; ++i) h[i] = float_to_f16_bits(src[i]);
            return;
        default:
            return;
    }
}

}  // namespace deltatune
