#include "runtime/model/gpu_proj.h"

#if DELTATUNE_HAVE_CUDA
#include "runtime/base/status_macros.h"
#include "runtime/device/gemm.h"
#include "runtime/model/gpu_lora.h"

namespace deltatune {

namespace {

// xa (T, r) = scale in A^T, bf16: the adapter's first product, scaled once here so that both
// the output's product and dB read it as is.
absl::StatusOr<DeviceMemory> lora_down(const GpuCtx& x, const GpuLora& l, const void* in,
                                       int64_t in_dim) {
    const int64_t T = x.b.tokens;
    DT_ASSIGN_OR_RETURN(DeviceMemory xa, x.dev.allocate(sizeof(bf16) * T * l.rank));
    GemmArgs g;
    g.a = in, g.lda = in_dim, g.b = l.A, g.trans_b = true, g.ldb = in_dim;
    g.c = xa.get(), g.ldc = l.rank, g.m = T, g.n = l.rank, g.k = in_dim, g.alpha = l.scale;
    DT_RETURN_IF_ERROR(x.gemm().run(g, x.stream()));
    return xa;
}

}  // namespace

absl::Status proj_forward(const GpuCtx& x, const GpuParam& p, void* y, const void* in,
                          int64_t in_dim, int64_t out_dim) {
    const int64_t T = x.b.tokens;
    DT_RETURN_IF_ERROR(linear_forward(x.gemm(), y, in, p.w, T, in_dim, out_dim, x.stream()));
    if (!p.lora) return absl::OkStatus();
    const GpuLora& l = *p.lora;
    DT_ASSIGN_OR_RETURN(DeviceMemory xa, lora_down(x, l, in, in_dim));
    GemmArgs g;  // y += xa B^T
    g.a = xa.get(), g.lda = l.rank, g.b = l.B, g.trans_b = true, g.ldb = l.rank;
    g.c = y, g.ldc = out_dim, g.m = T, g.n = out_dim, g.k = l.rank, g.beta = 1.0f;
    return x.gemm().run(g, x.stream());
}

absl::Status proj_backward_dx(const GpuCtx& x, const GpuParam& p, void* dx, const void* dy,
                              const void* in, int64_t in_dim, int64_t out_dim, bool accumulate) {
    const int64_t T = x.b.tokens;
    Gemm& gemm = x.gemm();
    DT_RETURN_IF_ERROR(
        linear_backward_dx(gemm, dx, dy, p.w, T, in_dim, out_dim, accumulate, x.stream()));
    if (!p.lora) return absl::OkStatus();
    const GpuLora& l = *p.lora;
    // g (T, r) = scale dy B: dx += g A, dA += g^T in.
    DT_ASSIGN_OR_RETURN(DeviceMemory dyb, x.dev.allocate(sizeof(bf16) * T * l.rank));
    GemmArgs g;
    g.a = dy, g.lda = out_dim, g.b = l.B, g.ldb = l.rank, g.c = dyb.get(), g.ldc = l.rank;
    g.m = T, g.n = l.rank, g.k = out_dim, g.alpha = l.scale;
    DT_RETURN_IF_ERROR(gemm.run(g, x.stream()));
    GemmArgs d;
    d.a = dyb.get(), d.lda = l.rank, d.b = l.A, d.ldb = in_dim, d.c = dx, d.ldc = in_dim;
    d.m = T, d.n = in_dim, d.k = l.rank, d.beta = 1.0f;
    DT_RETURN_IF_ERROR(gemm.run(d, x.stream()));
    DT_RETURN_IF_ERROR(
        linear_backward_dw(gemm, l.dA, dyb.get(), in, T, in_dim, l.rank, x.stream()));
    // dB += dy^T xa, the forward's scaled product recomputed (T r values: cheaper than keeping
    // one per projection through the step).
    DT_ASSIGN_OR_RETURN(DeviceMemory xa, lora_down(x, l, in, in_dim));
    return linear_backward_dw(gemm, l.dB, dy, xa.get(), T, l.rank, out_dim, x.stream());
}

absl::Status proj_backward_dw(const GpuCtx& x, const GpuParam& p, const void* dy, const void* in,
                              int64_t in_dim, int64_t out_dim) {
    if (!p.grad) return absl::OkStatus();  // frozen
    return linear_backward_dw(x.gemm(), p.grad, dy, in, x.b.tokens, in_dim, out_dim, x.stream(),
                              !p.fresh);
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
