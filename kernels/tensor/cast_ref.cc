// CPU references of the fp32 <-> bf16 casts.
#include "kernels/common/bf16_bits.h"
#include "kernels/tensor/cast.h"

namespace deltatune {

void cast_f32_to_bf16_ref(uint16_t* out, const float* in, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16_bits(in[i]);
}

void cast_bf16_to_f32_ref(float* out, const uint16_t* in, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(in[i]);
}

}  // namespace deltatune
