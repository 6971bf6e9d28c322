#include "runtime/device/linear_fp8.h"

#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/device/gemm.h"

#if DELTATUNE_HAVE_CUDA
#include "kernels/tensor/fp8.h"
#endif

namespace deltatune {

bool fp8_linear_supported(int sm_version, int64_t in, int64_t out) {
    return fp8_gpu_supported(sm_version) && in > 0 && out > 0 && in % 16 == 0 && out % 16 == 0;
}

#if DELTATUNE_HAVE_CUDA

namespace {

// One quantised operand in scratch: codes (rows, ld) and a factor per row.
struct Fp8Operand {
    DeviceMemory codes, factors;
    GemmIn type = GemmIn::kE4M3;
};

GemmIn gemm_type(Fp8Format f) {
    return f == Fp8Format::kE4M3 ? GemmIn::kE4M3 : GemmIn::kE5M2;
}

int64_t padded16(int64_t n) {
    return (n + 15) / 16 * 16;
}

// `src` (rows, cols) bf16 quantised per row.
absl::StatusOr<Fp8Operand> quantize_rows(const DeviceContext& dev, const void* src, int64_t rows,
                                         int64_t cols, Fp8Format f) {
    Fp8Operand o;
    o.type = gemm_type(f);
    DT_ASSIGN_OR_RETURN(o.codes, dev.allocate(static_cast<size_t>(rows * cols)));
    DT_ASSIGN_OR_RETURN(o.factors, dev.allocate(sizeof(float) * static_cast<size_t>(rows)));
    DT_CUDA_RETURN_IF_ERROR(quantize_rows_fp8(o.codes.as<uint8_t>(), o.factors.as<float>(),
                                              static_cast<const __nv_bfloat16*>(src), rows, cols, f,
                                              dev.compute_stream()));
    return o;
}

// `src` (rows, cols) bf16 stored transposed, (cols, ld), quantised per column of src.
absl::StatusOr<Fp8Operand> quantize_transposed(const DeviceContext& dev, const void* src,
                                               int64_t rows, int64_t cols, int64_t ld,
                                               Fp8Format f) {
    Fp8Operand o;
    o.type = gemm_type(f);
    DT_ASSIGN_OR_RETURN(o.codes, dev.allocate(static_cast<size_t>(cols * ld)));
    DT_ASSIGN_OR_RETURN(o.factors, dev.allocate(sizeof(float) * static_cast<size_t>(cols)));
    DT_ASSIGN_OR_RETURN(DeviceMemory amax, dev.allocate(sizeof(float) * static_cast<size_t>(cols)));
    DT_CUDA_RETURN_IF_ERROR(quantize_transposed_fp8(
        o.codes.as<uint8_t>(), o.factors.as<float>(), amax.as<float>(),
        static_cast<const __nv_bfloat16*>(src), rows, cols, ld, f, dev.compute_stream()));
    return o;
}

// C (m, n) = A B^T (+ C with beta 1), A (m, k) and B (n, k) quantised.
absl::Status fp8_gemm(const DeviceContext& dev, const Fp8Operand& a, const Fp8Operand& b, void* c,
                      GemmOut c_type, int64_t m, int64_t n, int64_t k, float beta) {
    GemmArgs g;
    g.a = a.codes.get(), g.lda = k, g.a_type = a.type, g.a_scale = a.factors.as<float>();
    g.b = b.codes.get(), g.trans_b = true, g.ldb = k, g.b_type = b.type;
    g.b_scale = b.factors.as<float>();
    g.c = c, g.c_type = c_type, g.ldc = n, g.m = m, g.n = n, g.k = k, g.beta = beta;
    return dev.gemm()->run(g, dev.compute_stream());
}

}  // namespace

absl::Status fp8_linear_forward(const DeviceContext& dev, void* y, const void* x, const void* w,
                                int64_t rows, int64_t in, int64_t out) {
    if (rows == 0) return absl::OkStatus();
    DT_ASSIGN_OR_RETURN(Fp8Operand qx, quantize_rows(dev, x, rows, in, Fp8Format::kE4M3));
    DT_ASSIGN_OR_RETURN(Fp8Operand qw, quantize_rows(dev, w, out, in, Fp8Format::kE4M3));
    return fp8_gemm(dev, qx, qw, y, GemmOut::kBF16, rows, out, in, 0.0f);
}

absl::Status fp8_linear_backward_dx(const DeviceContext& dev, void* dx, const void* dy,
                                    const void* w, int64_t rows, int64_t in, int64_t out,
                                    bool accumulate) {
    if (rows == 0) return absl::OkStatus();
    DT_ASSIGN_OR_RETURN(Fp8Operand qdy, quantize_rows(dev, dy, rows, out, Fp8Format::kE5M2));
    DT_ASSIGN_OR_RETURN(Fp8Operand qwt,
                        quantize_transposed(dev, w, out, in, out, Fp8Format::kE4M3));
    return fp8_gemm(dev, qdy, qwt, dx, GemmOut::kBF16, rows, in, out, accumulate ? 1.0f : 0.0f);
}

absl::Status fp8_linear_backward_dw(const DeviceContext& dev, float* dw, const void* dy,
                                    const void* x, int64_t rows, int64_t in, int64_t out,
                                    bool accumulate) {
    const int64_t k = padded16(rows);
    if (k == 0) {  // no tokens: nothing to add, or a zero gradient to write
        if (!accumulate) {
            DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
                dw, 0, sizeof(float) * static_cast<size_t>(out * in), dev.compute_stream()));
        }
        return absl::OkStatus();
    }
    DT_ASSIGN_OR_RETURN(Fp8Operand qdyt,
                        quantize_transposed(dev, dy, rows, out, k, Fp8Format::kE5M2));
    DT_ASSIGN_OR_RETURN(Fp8Operand qxt, quantize_transposed(dev, x, rows, in, k, Fp8Format::kE4M3));
    return fp8_gemm(dev, qdyt, qxt, dw, GemmOut::kF32, out, in, k, accumulate ? 1.0f : 0.0f);
}

#else

absl::Status fp8_linear_forward(const DeviceContext&, void*, const void*, const void*, int64_t,
                                int64_t, int64_t) {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status fp8_linear_backward_dx(const DeviceContext&, void*, const void*, const void*, int64_t,
                                    int64_t, int64_t, bool) {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status fp8_linear_backward_dw(const DeviceContext&, float*, const void*, const void*, int64_t,
                                    int64_t, int64_t, bool) {
    return absl::FailedPreconditionError("built without CUDA");
}

#endif

}  // namespace deltatune
