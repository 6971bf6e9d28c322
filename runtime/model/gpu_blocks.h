// The CUDA blocks of a Qwen3.5 decoder layer over a packed 1D batch: bf16 activations and
// weights, GDN core fused in bf16 (head dims 128) or on fp32 simple kernels, norms in fp32 math,
// fp32 weight gradients. Each block maps its normed input a (T, H) to its output (T, H); the
// residual adds live in the fused RMSNorm kernels of the model (qwen35_gpu_model.cc). Accumulation
// contract: parameter gradients +=, the gradient of the block input `a` is written (=), every other
// activation gradient is written (=).
#pragma once

#include "runtime/device/device_context.h"
#include "runtime/model/kernel_choice.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

// True when the wgmma core serves this config (choose_attention): its backward takes y, so the
// layer keeps y alone; the other cores' backwards take the ungated o too. Plain host logic, in
// every build: the memory planner asks it too.
bool gpu_attention_keeps_y_only(const Qwen35Config& c, const GpuArch& gpu, AttentionCore core);

}  // namespace deltatune

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/device/device_context.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

using bf16 = __nv_bfloat16;
struct GpuLora;  // gpu_lora.h

// One parameter on the device: the bf16 copy the GEMMs read, the fp32 master (the small GDN
// weights are read in fp32 as the reference computes them), and its fp32 gradient.
struct GpuParam {
    const bf16* w = nullptr;
    const float* w32 = nullptr;
    float* grad = nullptr;
    // The gradient holds nothing yet this step (zero_grads left it for its dW GEMM): that GEMM
    // writes (beta 0) instead of adding, saving the zeroing pass and the read of C.
    bool fresh = false;
    // The projection's LoRA adapter (gpu_proj.h adds its branch); null without one. A frozen
    // base has no gradient (grad null on the projections).
    const GpuLora* lora = nullptr;
    // The projection's GEMMs run in FP8 where its shape allows (runtime/device/linear_fp8.h).
    bool fp8 = false;
};

struct GpuLayer {
    LayerType type;
    GpuParam input_norm, post_norm, mlp_gate, mlp_up, mlp_down;
    GpuParam in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, conv_w, A_log, dt_bias, gdn_norm,
        out_proj;
    GpuParam q_proj, k_proj, v_proj, o_proj, q_norm, k_norm;
};

// The wgmma attention forward's work list for one batch (it depends on the documents and the
// head counts only): built by the batch's first attention forward, taken by every later one
// (the other layers', and the backward's recomputations), all on the compute stream. `list` is
// set only once the list is built.
struct GpuAttentionSchedule {
    DeviceMemory list;
};

// The batch on the device; T and num_docs known on the host too.
struct GpuBatch {
    int64_t tokens = 0, num_docs = 0;
    const int32_t* cu_seqlens = nullptr;    // (num_docs + 1)
    const int32_t* position_ids = nullptr;  // (T)
    int64_t max_doc_tokens = 0;             // the longest document (0: not known)
    // Where the batch's attention forwards share their work list (the model always sets it).
    GpuAttentionSchedule* attention_schedule = nullptr;
};

struct GpuCtx {
    DeviceContext& dev;
    const Qwen35Config& c;
    const GpuBatch& b;
    // The forward's activations will feed a backward: blocks may keep intermediates for it (the
    // GDN block keeps the delta rule's chunk states instead of the backward replaying them).
    bool keep_for_backward = false;
    cudaStream_t stream() const { return dev.compute_stream(); }
    Gemm& gemm() const { return *dev.gemm(); }
    // What the kernel choices (kernel_choice.h) depend on.
    KernelTarget kernel_target() const { return {dev.gpu(), dev.attention_core(), &c}; }
};

struct GpuMlpActs {
    DeviceMemory gate, up, h;  // (T, I) bf16 each
};

struct GpuAttentionActs {
    DeviceMemory qg;              // q_proj output (T, Hq, 2D) bf16: per head [query | gate]
    DeviceMemory k_raw, v;        // (T, Hkv, D) bf16
    DeviceMemory q, k;            // after q/k norm + RoPE: (T, Hq, D), (T, Hkv, D) bf16
    DeviceMemory q_rstd, k_rstd;  // (T, Hq), (T, Hkv) fp32
    DeviceMemory lse, y;          // (T, Hq) fp32; gated output (T, Hq D) bf16
    DeviceMemory o;  // ungated output (T, Hq, D) bf16: only for cores whose backward takes o
};

struct GpuGdnActs {
    DeviceMemory mixed;               // in_proj_qkv output (T, conv_dim) bf16
    DeviceMemory z;                   // (T, value_dim) bf16
    DeviceMemory b, a;                // (T, Hv) bf16 gate pre-activations
    DeviceMemory conv;                // conv + SiLU (T, conv_dim) fp32: [q | k | v] columns
    DeviceMemory qn, kn, q_rn, k_rn;  // (T, Hk, dk) fp32 L2-normalised, (T, Hk) fp32
    DeviceMemory beta, g;             // (T, Hv) fp32
    DeviceMemory o;                   // delta-rule output (T, Hv, dv) fp32
    DeviceMemory norm_rstd, normed;   // (T Hv) fp32, (T, value_dim) bf16
    // Fused path only (gpu_gdn_fused): the conv + SiLU output in bf16 (T, conv_dim), whose
    // [q | k | v] column blocks the rule reads in place, raw (it normalises q and k itself); `o`
    // is then bf16, and conv, qn, kn, q_rn, k_rn, beta, g stay empty (the rule fuses the norm
    // and the gates).
    DeviceMemory conv16;
    // With keep_for_backward: gated_delta_rule_forward_saving's intermediates for the backward.
    DeviceMemory rule_saved;
};

// True when the fused GDN kernels (causal_conv1d, gated_delta_rule, gated_rmsnorm) serve this
// config (choose_gdn_core: linear key/value head dims 128 on sm_90); otherwise the block runs
// kernels/gdn/gdn_simple.cu.
bool gpu_gdn_fused(const Qwen35Config& c, const GpuArch& gpu);

absl::Status gpu_mlp_forward(const GpuCtx& x, const GpuLayer& w, const bf16* a, bf16* out,
                             GpuMlpActs& acts);
absl::Status gpu_mlp_backward(const GpuCtx& x, const GpuLayer& w, const bf16* a, const bf16* dout,
                              bf16* da, const GpuMlpActs& acts);
absl::Status gpu_attention_forward(const GpuCtx& x, const GpuLayer& w, const bf16* a, bf16* out,
                                   GpuAttentionActs& acts);
absl::Status gpu_attention_backward(const GpuCtx& x, const GpuLayer& w, const bf16* a,
                                    const bf16* dout, bf16* da, const GpuAttentionActs& acts);
absl::Status gpu_gdn_forward(const GpuCtx& x, const GpuLayer& w, const bf16* a, bf16* out,
                             GpuGdnActs& acts);
absl::Status gpu_gdn_backward(const GpuCtx& x, const GpuLayer& w, const bf16* a, const bf16* dout,
                              bf16* da, const GpuGdnActs& acts);

}  // namespace deltatune
#endif
