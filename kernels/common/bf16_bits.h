// bf16 <-> fp32 bit conversions for host code (references and the runtime): round to nearest,
// ties to even; NaN stays NaN (quiet bit set, so a NaN whose payload sits only in the low 16 bits
// cannot truncate into infinity).
#pragma once

#include <cstdint>
#include <cstring>

namespace deltatune {

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

}  // namespace deltatune
