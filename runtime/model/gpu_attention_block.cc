// Gated full-attention block on the GPU: q/k/v GEMMs (q_proj's output holds per head
// [query | gate] and is read in place), fused q/k RMSNorm + partial RoPE, varlen causal GQA
// attention with the sigmoid gate (the core choose_attention picks: for head_dim 256 the wgmma
// kernels both ways by default, see the device context's attention_core(); the generic kernel for
// other head dims), o_proj. Backward mirrors forward.
#include "runtime/device/device_context.h"
#include "runtime/model/gpu_blocks.h"
#include "runtime/model/gpu_proj.h"

#if DELTATUNE_HAVE_CUDA
#include <cmath>
#include <utility>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_generic.h"
#include "kernels/attention/attention_wgmma.h"
#if DELTATUNE_HAVE_CUDNN_ATTENTION
#include "kernels/attention/attention_cudnn.h"
#endif
#include "kernels/attention/qk_norm_rope.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/model/gpu_blocks.h"

namespace deltatune {

namespace {

GatedAttentionArgs attention_args(const GpuCtx& x, const GpuAttentionActs& acts) {
    const int64_t D = x.c.head_dim, Hq = x.c.num_attention_heads;
    GatedAttentionArgs a;
    a.q = acts.q.as<bf16>();
    a.k = acts.k.as<bf16>();
    a.v = acts.v.as<bf16>();
    a.gate = acts.qg.as<bf16>() + D;
    a.gate_token_stride = Hq * 2 * D;
    a.gate_head_stride = 2 * D;
    a.cu_seqlens = x.b.cu_seqlens;
    a.num_docs = x.b.num_docs;
    a.tokens = x.b.tokens;
    a.q_heads = Hq;
    a.kv_heads = x.c.num_key_value_heads;
    a.head_dim = D;
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    a.max_doc_tokens = x.b.max_doc_tokens;
    return a;
}

// The core this batch runs, the same both ways: the op's choice, or the generic kernel where the
// fused cores reject the batch's arguments.
absl::StatusOr<KernelImpl> attention_core_for(const GpuCtx& x, const GatedAttentionArgs& a) {
    const ImplChoice core = choose_attention(x.kernel_target());
    if (core.impl == KernelImpl::kNotBuilt) return absl::FailedPreconditionError(core.why);
    if (core.impl != KernelImpl::kAttentionGeneric && !gated_attention_supported(a)) {
        return KernelImpl::kAttentionGeneric;
    }
    return core.impl;
}

// The wgmma forward: y and lse, the ungated o neither written nor kept (its backward takes y).
absl::Status wgmma_forward(const GpuCtx& x, const GatedAttentionArgs& args,
                           GpuAttentionActs& acts) {
    const size_t ws = gated_attention_forward_wgmma_workspace_bytes(args);
    GpuAttentionSchedule* shared = x.b.attention_schedule;
    if (shared == nullptr) {
        return absl::InternalError("gpu_attention_forward: the batch has no attention schedule");
    }
    const cudaStream_t s = x.stream();
    if (shared->list.get() == nullptr) {  // the batch's first attention forward
        DT_ASSIGN_OR_RETURN(DeviceMemory list, x.dev.allocate(ws));
        DT_CUDA_RETURN_IF_ERROR(gated_attention_forward_wgmma_schedule(args, list.get(), ws, s));
        shared->list = std::move(list);
    }
    DT_CUDA_RETURN_IF_ERROR(gated_attention_forward_wgmma_scheduled(
        acts.y.as<bf16>(), nullptr, acts.lse.as<float>(), args, shared->list.get(), ws, s));
    return absl::OkStatus();
}

// The cuDNN forward and backward (DELTATUNE_ATTENTION=cudnn, accepted only where it is built).
absl::Status cudnn_forward(const GpuCtx& x, const GatedAttentionArgs& args,
                           GpuAttentionActs& acts) {
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    DT_ASSIGN_OR_RETURN(CudnnAttention * cudnn, x.dev.cudnn_attention());
    if (cudnn == nullptr) return absl::InternalError("the device context has no cuDNN attention");
    DT_ASSIGN_OR_RETURN(const size_t ws, cudnn->forward_workspace_bytes(args));
    DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
    return cudnn->forward(acts.y.as<bf16>(), acts.o.as<bf16>(), acts.lse.as<float>(), args,
                          work.get(), ws, x.stream());
#else
    (void)x, (void)args, (void)acts;
    return absl::InternalError("this build has no cuDNN attention");
#endif
}

absl::Status cudnn_backward(const GpuCtx& x, const GatedAttentionArgs& args,
                            const GpuAttentionActs& acts, bf16* dq, bf16* dk, bf16* dv, bf16* dgate,
                            const bf16* dy) {
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    DT_ASSIGN_OR_RETURN(CudnnAttention * cudnn, x.dev.cudnn_attention());
    if (cudnn == nullptr) return absl::InternalError("the device context has no cuDNN attention");
    DT_ASSIGN_OR_RETURN(const size_t ws, cudnn->backward_workspace_bytes(args));
    DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
    return cudnn->backward(dq, dk, dv, dgate, dy, acts.o.as<bf16>(), acts.lse.as<float>(), args,
                           work.get(), ws, x.stream());
#else
    (void)x, (void)args, (void)acts, (void)dq, (void)dk, (void)dv, (void)dgate, (void)dy;
    return absl::InternalError("this build has no cuDNN attention");
#endif
}

// The forward of the cores that write the ungated o too (their backwards take it): y, o, lse.
absl::Status ungated_core_forward(const GpuCtx& x, KernelImpl core, const GatedAttentionArgs& args,
                                  GpuAttentionActs& acts) {
    bf16 *y = acts.y.as<bf16>(), *o = acts.o.as<bf16>();
    float* lse = acts.lse.as<float>();
    switch (core) {
        case KernelImpl::kAttentionCudnn:
            return cudnn_forward(x, args, acts);
        case KernelImpl::kAttentionFlash:
            DT_CUDA_RETURN_IF_ERROR(gated_attention_forward(y, o, lse, args, x.stream()));
            return absl::OkStatus();
        case KernelImpl::kAttentionGeneric:
            DT_CUDA_RETURN_IF_ERROR(gated_attention_forward_generic(y, o, lse, args, x.stream()));
            return absl::OkStatus();
        default:
            return absl::InternalError("not an attention core that writes the ungated output");
    }
}

// dq, dk, dv and dgate from dy, by the core the forward ran.
absl::Status core_backward(const GpuCtx& x, KernelImpl core, const GatedAttentionArgs& args,
                           const GpuAttentionActs& acts, bf16* dq, bf16* dk, bf16* dv, bf16* dgate,
                           const bf16* dy) {
    const cudaStream_t s = x.stream();
    const float* lse = acts.lse.as<float>();
    switch (core) {
        case KernelImpl::kAttentionWgmma: {
            const size_t ws = gated_attention_backward_wgmma_workspace_bytes(args);
            DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
            DT_CUDA_RETURN_IF_ERROR(gated_attention_backward_wgmma(
                dq, dk, dv, dgate, dy, acts.y.as<bf16>(), lse, args, work.get(), ws, s));
            return absl::OkStatus();
        }
        case KernelImpl::kAttentionCudnn:
            return cudnn_backward(x, args, acts, dq, dk, dv, dgate, dy);
        case KernelImpl::kAttentionFlash: {
            const size_t ws = gated_attention_backward_workspace_bytes(args);
            DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
            DT_CUDA_RETURN_IF_ERROR(gated_attention_backward(
                dq, dk, dv, dgate, dy, acts.o.as<bf16>(), lse, args, work.get(), ws, s));
            return absl::OkStatus();
        }
        case KernelImpl::kAttentionGeneric: {
            const size_t ws = gated_attention_backward_generic_workspace_bytes(args);
            DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(ws));
            DT_CUDA_RETURN_IF_ERROR(gated_attention_backward_generic(
                dq, dk, dv, dgate, dy, acts.o.as<bf16>(), lse, args, work.get(), ws, s));
            return absl::OkStatus();
        }
        default:
            return absl::InternalError("not an attention core");
    }
}

}  // namespace

absl::Status gpu_attention_forward(const GpuCtx& x, const GpuLayer& w, const bf16* a, bf16* out,
                                   GpuAttentionActs& acts) {
    const int64_t T = x.b.tokens, H = x.c.hidden_size, D = x.c.head_dim;
    const int64_t Hq = x.c.num_attention_heads, Hkv = x.c.num_key_value_heads;
    const float eps = static_cast<float>(x.c.rms_norm_eps);
    const size_t b2 = sizeof(bf16), f4 = sizeof(float);
    DT_ASSIGN_OR_RETURN(acts.qg, x.dev.allocate(b2 * T * Hq * 2 * D));
    DT_ASSIGN_OR_RETURN(acts.k_raw, x.dev.allocate(b2 * T * Hkv * D));
    DT_ASSIGN_OR_RETURN(acts.v, x.dev.allocate(b2 * T * Hkv * D));
    DT_ASSIGN_OR_RETURN(acts.q, x.dev.allocate(b2 * T * Hq * D));
    DT_ASSIGN_OR_RETURN(acts.k, x.dev.allocate(b2 * T * Hkv * D));
    DT_ASSIGN_OR_RETURN(acts.q_rstd, x.dev.allocate(f4 * T * Hq));
    DT_ASSIGN_OR_RETURN(acts.k_rstd, x.dev.allocate(f4 * T * Hkv));
    DT_ASSIGN_OR_RETURN(acts.lse, x.dev.allocate(f4 * T * Hq));
    DT_ASSIGN_OR_RETURN(acts.y, x.dev.allocate(b2 * T * Hq * D));
    const cudaStream_t s = x.stream();
    DT_RETURN_IF_ERROR(proj_forward(x, w.q_proj, acts.qg.get(), a, H, Hq * 2 * D));
    DT_RETURN_IF_ERROR(proj_forward(x, w.k_proj, acts.k_raw.get(), a, H, Hkv * D));
    DT_RETURN_IF_ERROR(proj_forward(x, w.v_proj, acts.v.get(), a, H, Hkv * D));
    DT_CUDA_RETURN_IF_ERROR(qk_norm_rope_forward(
        acts.q.as<bf16>(), acts.q_rstd.as<float>(), acts.qg.as<bf16>(), Hq * 2 * D, 2 * D,
        w.q_norm.w, x.b.position_ids, T, Hq, D, x.c.rotary_dim(), x.c.rope_theta, eps, s));
    DT_CUDA_RETURN_IF_ERROR(qk_norm_rope_forward(
        acts.k.as<bf16>(), acts.k_rstd.as<float>(), acts.k_raw.as<bf16>(), Hkv * D, D, w.k_norm.w,
        x.b.position_ids, T, Hkv, D, x.c.rotary_dim(), x.c.rope_theta, eps, s));
    const GatedAttentionArgs args = attention_args(x, acts);
    DT_ASSIGN_OR_RETURN(const KernelImpl core, attention_core_for(x, args));
    if (core == KernelImpl::kAttentionWgmma) {
        DT_RETURN_IF_ERROR(wgmma_forward(x, args, acts));
        return proj_forward(x, w.o_proj, out, acts.y.get(), Hq * D, H);
    }
    DT_ASSIGN_OR_RETURN(acts.o, x.dev.allocate(b2 * T * Hq * D));
    DT_RETURN_IF_ERROR(ungated_core_forward(x, core, args, acts));
    return proj_forward(x, w.o_proj, out, acts.y.get(), Hq * D, H);
}

absl::Status gpu_attention_backward(const GpuCtx& x, const GpuLayer& w, const bf16* a,
                                    const bf16* dout, bf16* da, const GpuAttentionActs& acts) {
    const int64_t T = x.b.tokens, H = x.c.hidden_size, D = x.c.head_dim;
    const int64_t Hq = x.c.num_attention_heads, Hkv = x.c.num_key_value_heads;
    const size_t b2 = sizeof(bf16);
    const cudaStream_t s = x.stream();
    DT_ASSIGN_OR_RETURN(DeviceMemory dy, x.dev.allocate(b2 * T * Hq * D));
    DT_RETURN_IF_ERROR(
        proj_backward_dx(x, w.o_proj, dy.get(), dout, acts.y.get(), Hq * D, H, false));
    DT_RETURN_IF_ERROR(proj_backward_dw(x, w.o_proj, dout, acts.y.get(), Hq * D, H));

    DT_ASSIGN_OR_RETURN(DeviceMemory dqg, x.dev.allocate(b2 * T * Hq * 2 * D));
    DT_ASSIGN_OR_RETURN(DeviceMemory dq, x.dev.allocate(b2 * T * Hq * D));
    DT_ASSIGN_OR_RETURN(DeviceMemory dk, x.dev.allocate(b2 * T * Hkv * D));
    DT_ASSIGN_OR_RETURN(DeviceMemory dv, x.dev.allocate(b2 * T * Hkv * D));
    const GatedAttentionArgs args = attention_args(x, acts);
    bf16* dgate = dqg.as<bf16>() + D;
    DT_ASSIGN_OR_RETURN(const KernelImpl core, attention_core_for(x, args));
    if (core != KernelImpl::kAttentionWgmma && acts.o.get() == nullptr) {
        // The core is chosen the same way both ways, so this is a bug, not an input error: fail
        // rather than read an o that was never written.
        return absl::InternalError(
            "gpu_attention_backward: the forward kept y only (wgmma core), the backward's core "
            "takes the ungated o");
    }
    DT_RETURN_IF_ERROR(core_backward(x, core, args, acts, dq.as<bf16>(), dk.as<bf16>(),
                                     dv.as<bf16>(), dgate, dy.as<bf16>()));
    DT_ASSIGN_OR_RETURN(DeviceMemory dk_raw, x.dev.allocate(b2 * T * Hkv * D));
    const size_t wq = qk_norm_rope_backward_workspace_bytes(T, Hq, D);
    const size_t wk = qk_norm_rope_backward_workspace_bytes(T, Hkv, D);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, x.dev.allocate(wq > wk ? wq : wk));
    DT_CUDA_RETURN_IF_ERROR(qk_norm_rope_backward(
        dqg.as<bf16>(), w.q_norm.grad, dq.as<bf16>(), acts.qg.as<bf16>(), Hq * 2 * D, 2 * D,
        w.q_norm.w, acts.q_rstd.as<float>(), x.b.position_ids, T, Hq, D, x.c.rotary_dim(),
        x.c.rope_theta, work.get(), wq, s));
    DT_CUDA_RETURN_IF_ERROR(qk_norm_rope_backward(
        dk_raw.as<bf16>(), w.k_norm.grad, dk.as<bf16>(), acts.k_raw.as<bf16>(), Hkv * D, D,
        w.k_norm.w, acts.k_rstd.as<float>(), x.b.position_ids, T, Hkv, D, x.c.rotary_dim(),
        x.c.rope_theta, work.get(), wk, s));

    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.q_proj, da, dqg.get(), a, H, Hq * 2 * D, false));
    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.k_proj, da, dk_raw.get(), a, H, Hkv * D, true));
    DT_RETURN_IF_ERROR(proj_backward_dx(x, w.v_proj, da, dv.get(), a, H, Hkv * D, true));
    DT_RETURN_IF_ERROR(proj_backward_dw(x, w.q_proj, dqg.get(), a, H, Hq * 2 * D));
    DT_RETURN_IF_ERROR(proj_backward_dw(x, w.k_proj, dk_raw.get(), a, H, Hkv * D));
    return proj_backward_dw(x, w.v_proj, dv.get(), a, H, Hkv * D);
}

}  // namespace deltatune
#endif

namespace deltatune {

bool gpu_attention_keeps_y_only(const Qwen35Config& c, const GpuArch& gpu, AttentionCore core) {
    return choose_attention({gpu, core, &c}).impl == KernelImpl::kAttentionWgmma;
}

}  // namespace deltatune
