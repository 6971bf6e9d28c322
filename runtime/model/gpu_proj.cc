#include "runtime/model/gpu_proj.h"

#if DELTATUNE_HAVE_CUDA
#include "runtime/base/status_macros.h"
#include "runtime/device/gemm.h"
#include "runtime/device/linear_fp8.h"
#include "runtime/model/gpu_lora.h"

namespace deltatune {

namespace {

bool runs_fp8(const GpuCtx& x, const GpuParam& p, int64_t in_dim, int64_t out_dim) {
    return p.fp8 && fp8_linear_supported(x.dev, in_dim, out_dim);
}

}  // namespace

absl::Status proj_forward(const GpuCtx& x, const GpuParam& p, void* y, const void* in,
                          int64_t in_dim, int64_t out_dim) {
    const int64_t T = x.b.tokens;
    if (runs_fp8(x, p, in_dim, out_dim)) {
        DT_RETURN_IF_ERROR(fp8_linear_forward(x.dev, y, in, p.w, T, in_dim, out_dim));
    } else {
        DT_RETURN_IF_ERROR(linear_forward(x.gemm(), y, in, p.w, T, in_dim, out_dim, x.stream()));
    }
    if (!p.lora) return absl::OkStatus();
    const GpuLora& l = *p.lora;
    GpuLoraGroup& grp = *l.group;
    if (l.first) {  // xa = scale x A^T for every member of the group at once
        GemmArgs d;
        d.a = in, d.lda = in_dim, d.b = grp.A, d.trans_b = true, d.ldb = in_dim;
        d.c = grp.xa, d.ldc = grp.rank, d.m = T, d.n = grp.rank, d.k = in_dim, d.alpha = l.scale;
        DT_RETURN_IF_ERROR(x.gemm().run(d, x.stream()));
        grp.pending = 0;
    }
    GemmArgs u;  // y += xa B^T, this member's columns of xa
    u.a = grp.xa + l.column, u.lda = grp.rank, u.b = l.B, u.trans_b = true, u.ldb = l.rank;
    u.c = y, u.ldc = out_dim, u.m = T, u.n = out_dim, u.k = l.rank, u.beta = 1.0f;
    return x.gemm().run(u, x.stream());
}

namespace {

// Once every member's scale dy B is in the group's dyb: dx += dyb A and dA += dyb^T x, one GEMM
// each for the whole group.
absl::Status lora_group_backward(const GpuCtx& x, const GpuLoraGroup& grp, void* dx, const void* in,
                                 int64_t in_dim) {
    const int64_t T = x.b.tokens;
    GemmArgs d;
    d.a = grp.dyb, d.lda = grp.rank, d.b = grp.A, d.ldb = in_dim, d.c = dx, d.ldc = in_dim;
    d.m = T, d.n = in_dim, d.k = grp.rank, d.beta = 1.0f;
    DT_RETURN_IF_ERROR(x.gemm().run(d, x.stream()));
    GemmArgs a;
    a.a = grp.dyb, a.trans_a = true, a.lda = grp.rank, a.b = in, a.ldb = in_dim;
    a.c = grp.dA, a.c_type = GemmOut::kF32, a.ldc = in_dim;
    a.m = grp.rank, a.n = in_dim, a.k = T, a.beta = 1.0f;
    return x.gemm().run(a, x.stream());
}

}  // namespace

absl::Status proj_backward_dx(const GpuCtx& x, const GpuParam& p, void* dx, const void* dy,
                              const void* in, int64_t in_dim, int64_t out_dim, bool accumulate) {
    const int64_t T = x.b.tokens;
    Gemm& gemm = x.gemm();
    if (runs_fp8(x, p, in_dim, out_dim)) {
        DT_RETURN_IF_ERROR(
            fp8_linear_backward_dx(x.dev, dx, dy, p.w, T, in_dim, out_dim, accumulate));
    } else {
        DT_RETURN_IF_ERROR(
            linear_backward_dx(gemm, dx, dy, p.w, T, in_dim, out_dim, accumulate, x.stream()));
    }
    if (!p.lora) return absl::OkStatus();
    const GpuLora& l = *p.lora;
    GpuLoraGroup& grp = *l.group;
    GemmArgs g;  // this member's columns of dyb = scale dy B
    g.a = dy, g.lda = out_dim, g.b = l.B, g.ldb = l.rank, g.c = grp.dyb + l.column;
    g.ldc = grp.rank, g.m = T, g.n = l.rank, g.k = out_dim, g.alpha = l.scale;
    DT_RETURN_IF_ERROR(gemm.run(g, x.stream()));
    GemmArgs b;  // dB += dy^T xa, the forward's scaled product kept in the group's xa
    b.a = dy, b.trans_a = true, b.lda = out_dim, b.b = grp.xa + l.column, b.ldb = grp.rank;
    b.c = l.dB, b.c_type = GemmOut::kF32, b.ldc = l.rank;
    b.m = out_dim, b.n = l.rank, b.k = T, b.beta = 1.0f;
    DT_RETURN_IF_ERROR(gemm.run(b, x.stream()));
    if (++grp.pending < grp.members) return absl::OkStatus();
    grp.pending = 0;
    return lora_group_backward(x, grp, dx, in, in_dim);
}

absl::Status proj_backward_dw(const GpuCtx& x, const GpuParam& p, const void* dy, const void* in,
                              int64_t in_dim, int64_t out_dim) {
    if (!p.grad) return absl::OkStatus();  // frozen
    if (runs_fp8(x, p, in_dim, out_dim)) {
        return fp8_linear_backward_dw(x.dev, p.grad, dy, in, x.b.tokens, in_dim, out_dim, !p.fresh);
    }
    return linear_backward_dw(x.gemm(), p.grad, dy, in, x.b.tokens, in_dim, out_dim, x.stream(),
                              !p.fresh);
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
