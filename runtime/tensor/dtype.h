// Element types the runtime stores, their sizes and names (safetensors spellings), and exact
// conversions between fp32 and the 16-bit float formats (round to nearest even, NaN kept quiet).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace deltatune {

enum class DType : uint8_t { kBF16, kF16, kF32, kI32, kI64 };

size_t dtype_size(DType t);
// Safetensors / Hugging Face spelling: "BF16", "F16", "F32", "I32", "I64".
const char* dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

// bf16 is the top half of an fp32. Rounds to nearest, ties to even; NaN stays NaN (quiet bit set
// so truncation cannot turn a NaN with low-only mantissa bits into infinity).
inline uint16_t float_to_bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    const uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return static_cast<uint16_t>(u >> 16);
}

inline float bf16_bits_to_float(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// IEEE binary16, round to nearest even, with subnormals, overflow to infinity and NaN kept.
uint16_t float_to_f16_bits(float f);
float f16_bits_to_float(uint16_t h);

}  // namespace deltatune
