// Element types the runtime stores, their sizes and names (safetensors spellings), and exact
// conversions between fp32 and the 16-bit float formats (round to nearest even, NaN kept quiet).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "kernels/common/bf16_bits.h"  // float_to_bf16_bits, bf16_bits_to_float

namespace deltatune {

enum class DType : uint8_t { kBF16, kF16, kF32, kI32, kI64 };

size_t dtype_size(DType t);
// Safetensors / Hugging Face spelling: "BF16", "F16", "F32", "I32", "I64".
const char* dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

// IEEE binary16, round to nearest even, with subnormals, overflow to infinity and NaN kept.
uint16_t float_to_f16_bits(float f);
float f16_bits_to_float(uint16_t h);

// Float element spans between fp32 and a float dtype (BF16, F16, F32), with the conversions
// above: what Tensor::to_dtype computes, a piece at a time.
void float_span_to_f32(DType from, const void* src, float* dst, int64_t n);
void f32_to_float_span(DType to, const float* src, void* dst, int64_t n);
inline bool is_float_dtype(DType t) {
    return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32;
}

}  // namespace deltatune
