// Gated DeltaNet block on the GPU: projections (cuBLASLt), then the GDN core, then out_proj.
// When the fused kernels serve the shape (choose_gdn_core: head dims 128 on sm_90) the core is
// kernels/gdn/causal_conv1d.cu (conv + SiLU), kernels/gdn/gdn_chunked_rule*.cu (chunked rule with
// the q/k L2 norm and the beta/g gates fused) and kernels/norm/gated_rmsnorm.cu, bf16 between them;
// otherwise it runs on the reference-grade kernels of kernels/gdn/gdn_simple.cu (fp32
// intermediates). Conv window and recurrent state reset at every document start. Backward mirrors
// forward.
#if DELTATUNE_HAVE_CUDA
#include <cmath>

#include "kernels/gdn/causal_conv1d.h"
#include "kernels/gdn/gdn_chunked_rule.h"
#include "kernels/gdn/gdn_simple.h"
#include "kernels/norm/gated_rmsnorm.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/model/gpu_blocks.h"
#include "runtime/model/gpu_proj.h"

namespace deltatune {

namespace {

constexpr float kL2Eps = 1e-6f;  // FLA / transformers l2norm eps

GdnRuleArgs rule_args(const GpuCtx& x, const GpuGdnActs& acts) {
    GdnRuleArgs r;
    r.q = acts.qn.as<float>();
    r.k = acts.kn.as<float>();
    r.v = acts.conv.as<float>() + 2 * x.c.key_dim();
    r.v_token_stride = x.c.conv_dim();
    r.g = acts.g.as<float>();
    r.beta = acts.beta.as<float>();
    r.cu_seqlens = x.b.cu_seqlens;
    r.num_docs = x.b.num_docs;
    r.tokens = x.b.tokens;
    r.k_heads = x.c.linear_num_key_heads;
    r.v_heads = x.c.linear_num_value_heads;
    r.dk = x.c.linear_key_head_dim;
    r.dv = x.c.linear_value_head_dim;
    r.scale = 1.0f / std::sqrt(static_cast<float>(r.dk));
    return r;
}

// The simple core, backward: same contract as fused_core_backward.
absl::Status simple_core_backward(const GpuCtx& x, const GpuLayer& w, const GpuGdnActs& acts,
                                  const bf16* dnormed, bf16* dmixed, bf16* dz, bf16* db,
                                  bf16* da_raw) {
    const Qwen35Config& c = x.c;
    const int64_t T = x.b.tokens, C = c.conv_dim(), K = c.linear_conv_kernel_dim;
    const int64_t Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
    const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
    const int64_t KD = c.key_dim(), VD = c.value_dim();
    const size_t f4 = sizeof(float);
    const cudaStream_t s = x.stream();
    DT_ASSIGN_OR_RETURN(DeviceMemory d_o, x.dev.allocate(f4 * T * VD));
    DT_CUDA_RETURN_IF_ERROR(gdn_gated_rmsnorm_backward_simple(
        d_o.as<float>(), dz, w.gdn_norm.grad, dnormed, acts.o.as<float>(), acts.z.as<bf16>(),
        w.gdn_norm.w32, acts.norm_rstd.as<float>(), T * Hv, dv, s));

    // dconv (T, C) fp32 gathers dq | dk | dv in the conv output's column layout.
    DT_ASSIGN_OR_RETURN(DeviceMemory dconv, x.dev.allocate(f4 * T * C));
    DT_ASSIGN_OR_RETURN(DeviceMemory dqn, x.dev.allocate(f4 * T * KD));
    DT_ASSIGN_OR_RETURN(DeviceMemory dkn, x.dev.allocate(f4 * T * KD));
    DT_ASSIGN_OR_RETURN(DeviceMemory dg, x.dev.allocate(f4 * T * Hv));
    DT_ASSIGN_OR_RETURN(DeviceMemory dbeta, x.dev.allocate(f4 * T * Hv));
    const GdnRuleArgs r = rule_args(x, acts);
    const size_t ws = gdn_rule_backward_simple_workspace_bytes(r);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
    DT_CUDA_RETURN_IF_ERROR(gdn_rule_backward_simple(
        dqn.as<float>(), dkn.as<float>(), dconv.as<float>() + 2 * KD, dg.as<float>(),
        dbeta.as<float>(), d_o.as<float>(), r, work.get(), ws, s));
    work.reset();

    DT_CUDA_RETURN_IF_ERROR(gdn_gates_backward_simple(
        db, da_raw, w.A_log.grad, w.dt_bias.grad, dbeta.as<float>(), dg.as<float>(),
        acts.b.as<bf16>(), acts.a.as<bf16>(), w.A_log.w32, w.dt_bias.w32, T, Hv, s));
    DT_CUDA_RETURN_IF_ERROR(gdn_l2norm_backward_simple(dconv.as<float>(), C, dqn.as<float>(),
                                                       acts.qn.as<float>(), acts.q_rn.as<float>(),
                                                       T, Hk, dk, s));
    DT_CUDA_RETURN_IF_ERROR(gdn_l2norm_backward_simple(dconv.as<float>() + KD, C, dkn.as<float>(),
                                                       acts.kn.as<float>(), acts.k_rn.as<float>(),
                                                       T, Hk, dk, s));
    DT_CUDA_RETURN_IF_ERROR(gdn_conv_silu_backward_simple(
        dmixed, w.conv_w.grad, dconv.as<float>(), acts.mixed.as<bf16>(), w.conv_w.w32,
        x.b.cu_seqlens, x.b.num_docs, T, C, K, s));
    return absl::OkStatus();
}

// The core this batch runs, the same both ways: the op's choice, or the simple kernels where the
// chunked path's kernels reject the batch.
absl::StatusOr<KernelImpl> gdn_core_for(const GpuCtx& x) {
    const ImplChoice core = choose_gdn_core(x.kernel_target());
    if (core.impl == KernelImpl::kNotBuilt) return absl::FailedPreconditionError(core.why);
    if (core.impl != KernelImpl::kGdnChunked) return core.impl;
    const Qwen35Config& c = x.c;
    const bool batch_served =
        gated_delta_rule_supported(x.b.tokens, c.linear_num_key_heads, c.linear_num_value_heads,
                                   c.linear_key_head_dim, c.linear_value_head_dim) &&
        causal_conv1d_supported(x.b.tokens, c.conv_dim(), c.linear_conv_kernel_dim) &&
        gated_rmsnorm_supported(x.b.tokens * c.linear_num_value_heads, c.linear_value_head_dim);
    return batch_served ? KernelImpl::kGdnChunked : KernelImpl::kGdnSimple;
}

// The fused core, forward: mixed (T, C) -> normed (T, VD), filling acts' fused-path fields.
// The fused rule's inputs: q, k, v as the conv output's column blocks (no copies), the raw gates,
// the layer's gate weights.
GatedDeltaRuleArgs fused_rule_args(const GpuCtx& x, const GpuLayer& w, const GpuGdnActs& acts) {
    const Qwen35Config& c = x.c;
    GatedDeltaRuleArgs r;
    const bf16* conv = acts.conv16.as<bf16>();
    r.q = conv;
    r.k = conv + c.key_dim();
    r.v = conv + 2 * c.key_dim();
    r.qkv_stride = c.conv_dim();
    r.a = acts.a.as<bf16>();
    r.b = acts.b.as<bf16>();
    r.A_log = w.A_log.w32;
    r.dt_bias = w.dt_bias.w32;
    r.cu_seqlens = x.b.cu_seqlens;
    r.num_docs = x.b.num_docs;
    r.tokens = x.b.tokens;
    r.k_heads = c.linear_num_key_heads;
    r.v_heads = c.linear_num_value_heads;
    r.scale = 1.0f / std::sqrt(static_cast<float>(c.linear_key_head_dim));
    return r;
}

absl::Status fused_core_forward(const GpuCtx& x, const GpuLayer& w, GpuGdnActs& acts) {
    const Qwen35Config& c = x.c;
    const int64_t T = x.b.tokens, C = c.conv_dim(), K = c.linear_conv_kernel_dim;
    const int64_t Hv = c.linear_num_value_heads;
    const int64_t dv = c.linear_value_head_dim, VD = c.value_dim();
    const size_t b2 = sizeof(bf16), f4 = sizeof(float);
    const cudaStream_t s = x.stream();
    DT_ASSIGN_OR_RETURN(acts.conv16, x.dev.allocate(b2 * T * C));
    DT_CUDA_RETURN_IF_ERROR(causal_conv1d_forward(acts.conv16.as<bf16>(), acts.mixed.as<bf16>(),
                                                  w.conv_w.w, x.b.cu_seqlens, x.b.num_docs, T, C, K,
                                                  s));
    DT_ASSIGN_OR_RETURN(acts.o, x.dev.allocate(b2 * T * VD));
    const GatedDeltaRuleArgs rule = fused_rule_args(x, w, acts);
    if (x.keep_for_backward) {
        const size_t bytes = gated_delta_rule_saved_bytes(T, Hv);
        DT_ASSIGN_OR_RETURN(acts.rule_saved, x.dev.allocate(bytes));
        DT_CUDA_RETURN_IF_ERROR(gated_delta_rule_forward_saving(acts.o.as<bf16>(), rule,
                                                                acts.rule_saved.get(), bytes, s));
    } else {
        const size_t ws = gated_delta_rule_forward_workspace_bytes(T, Hv);
        DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
        DT_CUDA_RETURN_IF_ERROR(
            gated_delta_rule_forward(acts.o.as<bf16>(), rule, work.get(), ws, s));
    }
    DT_ASSIGN_OR_RETURN(acts.norm_rstd, x.dev.allocate(f4 * T * Hv));
    DT_ASSIGN_OR_RETURN(acts.normed, x.dev.allocate(b2 * T * VD));
    DT_CUDA_RETURN_IF_ERROR(gated_rmsnorm_forward(
        acts.normed.as<bf16>(), acts.norm_rstd.as<float>(), acts.o.as<bf16>(), acts.z.as<bf16>(),
        w.gdn_norm.w, T * Hv, dv, static_cast<float>(c.rms_norm_eps), s));
    return absl::OkStatus();
}

// The fused core, backward: dnormed (T, VD) -> dmixed (T, C), dz (T, VD), db, da_raw (T, Hv)
// written; conv_w, A_log, dt_bias, gdn_norm gradients accumulated.
absl::Status fused_core_backward(const GpuCtx& x, const GpuLayer& w, const GpuGdnActs& acts,
                                 const bf16* dnormed, bf16* dmixed, bf16* dz, bf16* db,
                                 bf16* da_raw) {
    const Qwen35Config& c = x.c;
    const int64_t T = x.b.tokens, C = c.conv_dim(), K = c.linear_conv_kernel_dim;
    const int64_t Hv = c.linear_num_value_heads;
    const int64_t dv = c.linear_value_head_dim, KD = c.key_dim(), VD = c.value_dim();
    const size_t b2 = sizeof(bf16);
    const cudaStream_t s = x.stream();
    DT_ASSIGN_OR_RETURN(DeviceMemory d_o, x.dev.allocate(b2 * T * VD));
    {
        const size_t ws = gated_rmsnorm_backward_workspace_bytes(T * Hv, dv);
        DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
        DT_CUDA_RETURN_IF_ERROR(gated_rmsnorm_backward(
            d_o.as<bf16>(), dz, w.gdn_norm.grad, dnormed, acts.o.as<bf16>(), acts.z.as<bf16>(),
            w.gdn_norm.w, acts.norm_rstd.as<float>(), T * Hv, dv, work.get(), ws, s));
    }
    DT_ASSIGN_OR_RETURN(DeviceMemory dconv, x.dev.allocate(b2 * T * C));
    {
        const GatedDeltaRuleArgs rule = fused_rule_args(x, w, acts);
        GatedDeltaRuleGrads grads;  // written into dconv's [dq | dk | dv] column blocks
        grads.dq = dconv.as<bf16>();
        grads.dk = dconv.as<bf16>() + KD;
        grads.dv = dconv.as<bf16>() + 2 * KD;
        grads.dqkv_stride = C;
        grads.da = da_raw;
        grads.db = db;
        grads.dA_log = w.A_log.grad;
        grads.ddt_bias = w.dt_bias.grad;
        if (acts.rule_saved.get()) {  // the forward kept its intermediates: no replay
            const size_t ws = gated_delta_rule_backward_scratch_bytes(T, Hv);
            DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
            DT_CUDA_RETURN_IF_ERROR(gated_delta_rule_backward_from_saved(
                grads, d_o.as<bf16>(), rule, acts.rule_saved.get(), work.get(), ws, s));
        } else {
            const size_t ws = gated_delta_rule_backward_workspace_bytes(T, Hv);
            DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
            DT_CUDA_RETURN_IF_ERROR(
                gated_delta_rule_backward(grads, d_o.as<bf16>(), rule, work.get(), ws, s));
        }
    }
    d_o.reset();
    const size_t ws = causal_conv1d_backward_workspace_bytes(T, C, K);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
    DT_CUDA_RETURN_IF_ERROR(causal_conv1d_backward(
        dmixed, w.conv_w.grad, dconv.as<bf16>(), acts.mixed.as<bf16>(), w.conv_w.w, x.b.cu_seqlens,
        x.b.num_docs, T, C, K, work.get(), ws, s));
    return absl::OkStatus();
}

}  // namespace

bool gpu_gdn_fused(const Qwen35Config& c, const GpuArch& gpu) {
    return choose_gdn_core({gpu, AttentionCore::kWgmma, &c}).impl == KernelImpl::kGdnChunked;
}

absl::Status gpu_gdn_forward(const GpuCtx& x, const GpuLayer& w, const bf16* a, bf16* out,
                             GpuGdnActs& acts) {
    const Qwen35Config& c = x.c;
    const int64_t T = x.b.tokens, H = c.hidden_size, C = c.conv_dim(), K = c.linear_conv_kernel_dim;
    const int64_t Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
    const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
    const int64_t KD = c.key_dim(), VD = c.value_dim();
    const size_t b2 = sizeof(bf16), f4 = sizeof(float);
    const cudaStream_t s = x.stream();
    DT_ASSIGN_OR_RETURN(acts.mixed, x.dev.allocate(b2 * T * C));
    DT_ASSIGN_OR_RETURN(acts.z, x.dev.allocate(b2 * T * VD));
    DT_ASSIGN_OR_RETURN(acts.b, x.dev.allocate(b2 * T * Hv));
    DT_ASSIGN_OR_RETURN(acts.a, x.dev.allocate(b2 * T * Hv));
    DT_RETURN_IF_ERROR(proj_forward(x, w.in_proj_qkv, acts.mixed.get(), a, H, C));
    DT_RETURN_IF_ERROR(proj_forward(x, w.in_proj_z, acts.z.get(), a, H, VD));
    DT_RETURN_IF_ERROR(proj_forward(x, w.in_proj_b, acts.b.get(), a, H, Hv));
    DT_RETURN_IF_ERROR(proj_forward(x, w.in_proj_a, acts.a.get(), a, H, Hv));
    DT_ASSIGN_OR_RETURN(const KernelImpl core, gdn_core_for(x));
    if (core == KernelImpl::kGdnChunked) {
        DT_RETURN_IF_ERROR(fused_core_forward(x, w, acts));
        return proj_forward(x, w.out_proj, out, acts.normed.get(), VD, H);
    }

    DT_ASSIGN_OR_RETURN(acts.conv, x.dev.allocate(f4 * T * C));
    DT_CUDA_RETURN_IF_ERROR(gdn_conv_silu_forward_simple(acts.conv.as<float>(),
                                                         acts.mixed.as<bf16>(), w.conv_w.w32,
                                                         x.b.cu_seqlens, x.b.num_docs, T, C, K, s));
    DT_ASSIGN_OR_RETURN(acts.qn, x.dev.allocate(f4 * T * KD));
    DT_ASSIGN_OR_RETURN(acts.kn, x.dev.allocate(f4 * T * KD));
    DT_ASSIGN_OR_RETURN(acts.q_rn, x.dev.allocate(f4 * T * Hk));
    DT_ASSIGN_OR_RETURN(acts.k_rn, x.dev.allocate(f4 * T * Hk));
    DT_CUDA_RETURN_IF_ERROR(gdn_l2norm_forward_simple(acts.qn.as<float>(), acts.q_rn.as<float>(),
                                                      acts.conv.as<float>(), C, T, Hk, dk, kL2Eps,
                                                      s));
    DT_CUDA_RETURN_IF_ERROR(gdn_l2norm_forward_simple(acts.kn.as<float>(), acts.k_rn.as<float>(),
                                                      acts.conv.as<float>() + KD, C, T, Hk, dk,
                                                      kL2Eps, s));
    DT_ASSIGN_OR_RETURN(acts.beta, x.dev.allocate(f4 * T * Hv));
    DT_ASSIGN_OR_RETURN(acts.g, x.dev.allocate(f4 * T * Hv));
    DT_CUDA_RETURN_IF_ERROR(gdn_gates_forward_simple(acts.beta.as<float>(), acts.g.as<float>(),
                                                     acts.b.as<bf16>(), acts.a.as<bf16>(),
                                                     w.A_log.w32, w.dt_bias.w32, T, Hv, s));

    DT_ASSIGN_OR_RETURN(acts.o, x.dev.allocate(f4 * T * VD));
    const GdnRuleArgs r = rule_args(x, acts);
    const size_t ws = gdn_rule_forward_simple_workspace_bytes(r);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
    DT_CUDA_RETURN_IF_ERROR(gdn_rule_forward_simple(acts.o.as<float>(), r, work.get(), ws, s));

    DT_ASSIGN_OR_RETURN(acts.norm_rstd, x.dev.allocate(f4 * T * Hv));
    DT_ASSIGN_OR_RETURN(acts.normed, x.dev.allocate(b2 * T * VD));
    DT_CUDA_RETURN_IF_ERROR(gdn_gated_rmsnorm_forward_simple(
        acts.normed.as<bf16>(), acts.norm_rstd.as<float>(), acts.o.as<float>(), acts.z.as<bf16>(),
        w.gdn_norm.w32, T * Hv, dv, static_cast<float>(c.rms_norm_eps), s));
    return proj_forward(x, w.out_proj, out, acts.normed.get(), VD, H);
}

absl::Status gpu_gdn_backward(const GpuCtx& x, const GpuLayer& w, const bf16* a, const bf16* dout,
                              bf16* da, const GpuGdnActs& acts) {
    const Qwen35Config& c = x.c;
    const int64_t T = x.b.tokens, H = c.hidden_size, C = c.conv_dim();
    const int64_t Hv = c.linear_num_value_heads, VD = c.value_dim();
    const size_t b2 = sizeof(bf16);

    DT_ASSIGN_OR_RETURN(DeviceMemory dnormed, x.dev.allocate(b2 * T * VD));
    DT_RETURN_IF_ERROR(
        proj_backward_dx(x, w.out_proj, dnormed.get(), dout, acts.normed.get(), VD, H, false));
    DT_RETURN_IF_ERROR(proj_backward_dw(x, w.out_proj, dout, acts.normed.get(), VD, H));
    DT_ASSIGN_OR_RETURN(DeviceMemory dz, x.dev.allocate(b2 * T * VD));
    DT_ASSIGN_OR_RETURN(DeviceMemory db, x.dev.allocate(b2 * T * Hv));
    DT_ASSIGN_OR_RETURN(DeviceMemory da_raw, x.dev.allocate(b2 * T * Hv));
    DT_ASSIGN_OR_RETURN(DeviceMemory dmixed, x.dev.allocate(b2 * T * C));
    DT_ASSIGN_OR_RETURN(const KernelImpl core, gdn_core_for(x));
    if (core == KernelImpl::kGdnChunked) {
        DT_RETURN_IF_ERROR(fused_core_backward(x, w, acts, dnormed.as<bf16>(), dmixed.as<bf16>(),
                                               dz.as<bf16>(), db.as<bf16>(), da_raw.as<bf16>()));
    } else {
        DT_RETURN_IF_ERROR(simple_core_backward(x, w, acts, dnormed.as<bf16>(), dmixed.as<bf16>(),
                                                dz.as<bf16>(), db.as<bf16>(), da_raw.as<bf16>()));
    }
    dnormed.reset();

    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.in_proj_qkv, da, dmixed.get(), a, H, C, false));
    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.in_proj_z, da, dz.get(), a, H, VD, true));
    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.in_proj_b, da, db.get(), a, H, Hv, true));
    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.in_proj_a, da, da_raw.get(), a, H, Hv, true));
    DT_RETURN_IF_ERROR(proj_backward_dw(x, w.in_proj_qkv, dmixed.get(), a, H, C));
    DT_RETURN_IF_ERROR(proj_backward_dw(x, w.in_proj_z, dz.get(), a, H, VD));
    DT_RETURN_IF_ERROR(proj_backward_dw(x, w.in_proj_b, db.get(), a, H, Hv));
    return proj_backward_dw(x, w.in_proj_a, da_raw.get(), a, H, Hv);
}

}  // namespace deltatune
#endif
