// FP8 quantisation for the opt-in FP8 projections: bf16 matrices to e4m3 (activations and
// weights) or e5m2 (gradients, wider range) with one power-of-two scale per row of the stored
// result. The scale puts the row's largest |x| into the format's top binade; being a power of two,
// scaling is exact and only the rounding to 8 bits (nearest even, saturating) loses digits, and
// the GPU kernels equal the references bit for bit.
//
// Each call writes the FP8 matrix and, per stored row, its dequantisation factor d (a power of
// two): the row's value is d * fp8, the factor cuBLASLt's outer-vector scaling multiplies by.
// - rows: (rows, cols) -> (rows, cols), one factor per row: the operand whose rows are a GEMM's
//   output rows and whose columns are its inner dimension (x and W in y = x W^T).
// - transposed: (rows, cols) -> (cols, ld) holding the transpose, one factor per column of the
//   input; columns rows..ld-1 of the result are zero (cuBLASLt's FP8 wants the inner dimension a
//   multiple of 16, and a batch's token count rarely is): W^T for dx = dy W, dy^T and x^T for
//   dW = dy^T x.
#pragma once

#include <math.h>  // frexpf, ldexpf: the same functions in host and device code

#include <cfloat>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

enum class Fp8Format : uint8_t { kE4M3, kE5M2 };

// The largest finite magnitude: 448 (e4m3), 57344 (e5m2).
double fp8_max(Fp8Format f);
// The factor d = 2^-e for a row whose largest magnitude is amax: the largest e with
// amax * 2^e <= fp8_max(f), e within [-126, 126]; 1 for amax 0 (or not finite). One definition
// for the reference and the kernels, which must choose the same factors.
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline float
    fp8_dequant_factor(float amax, Fp8Format f) {
    if (!(amax > 0.0f && amax <= FLT_MAX)) return 1.0f;
    int exp2 = 0;
    const float m = frexpf(amax, &exp2);             // amax = (2m) 2^(exp2 - 1), 2m in [1, 2)
    const int top = f == Fp8Format::kE4M3 ? 8 : 15;  // fp8_max = 1.75 * 2^top
    int e = top - (exp2 - 1) - (2.0f * m > 1.75f ? 1 : 0);
    e = e < -126 ? -126 : (e > 126 ? 126 : e);
    return ldexpf(1.0f, -e);
}

// CPU references, exact by construction (fp64): the nearest FP8 value to x (ties to the even
// code, magnitudes past the largest finite saturate to it, NaN stays NaN), and a code's value.
uint8_t fp8_encode_ref(double x, Fp8Format f);
double fp8_decode_ref(uint8_t code, Fp8Format f);

// in: bf16 bits. See the header comment for the two layouts.
void quantize_rows_fp8_ref(uint8_t* out, float* dequant, const uint16_t* in, int64_t rows,
                           int64_t cols, Fp8Format f);
void quantize_transposed_fp8_ref(uint8_t* out, float* dequant, const uint16_t* in, int64_t rows,
                                 int64_t cols, int64_t ld, Fp8Format f);

#if DELTATUNE_HAVE_CUDA
// Device pointers; any shape, `in` 2-byte aligned (16-byte aligned rows take the vector path).
// ld >= rows and a multiple of 16. `amax_scratch`: cols floats of device scratch the transposed
// form reduces into. Launch errors returned, never synchronises.
cudaError_t quantize_rows_fp8(uint8_t* out, float* dequant, const __nv_bfloat16* in, int64_t rows,
                              int64_t cols, Fp8Format f, cudaStream_t stream);
cudaError_t quantize_transposed_fp8(uint8_t* out, float* dequant, float* amax_scratch,
                                    const __nv_bfloat16* in, int64_t rows, int64_t cols, int64_t ld,
                                    Fp8Format f, cudaStream_t stream);
#endif

}  // namespace deltatune
