// The fp32 CPU reference blocks of a Qwen3.5 decoder layer, built from kernels/*_ref. Each block
// maps its input x (T, H) to its output (T, H), which the caller adds to the residual stream.
// Accumulation contract: parameter gradients +=, the input gradient dx += (it is the residual
// stream's gradient), every other activation gradient is written (=).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/qwen35_config.h"
#include "runtime/model/qwen35_params.h"

namespace deltatune {

using Buf = std::vector<float>;

struct BatchMeta {
    int64_t tokens;             // T
    const int32_t* cu_seqlens;  // (num_docs + 1)
    int64_t num_docs;
    const int32_t* position_ids;  // (T)
};

struct GdnBlockActs {
    Buf a, rstd;                   // input norm: (T, H), (T)
    Buf mixed;                     // in_proj_qkv output before the conv: (T, conv_dim)
    Buf conv;                      // conv + SiLU: (T, conv_dim)
    Buf q, k, v;                   // split: (T, Hk, dk), (T, Hk, dk), (T, Hv, dv)
    Buf qn, kn, q_rnorm, k_rnorm;  // L2-normalised q, k and their 1/norm: (T*Hk)
    Buf z, b, a_raw;               // (T, Hv*dv), (T, Hv), (T, Hv)
    Buf beta, g;                   // (T, Hv)
    Buf o;                         // delta-rule output (T, Hv, dv)
    Buf norm_rstd, normed;         // gated RMSNorm: (T*Hv), (T, Hv*dv)
};

struct AttentionBlockActs {
    Buf a, rstd;                 // input norm: (T, H), (T)
    Buf q_raw, gate;             // from q_proj: (T, Hq, D) each
    Buf k_raw, v;                // (T, Hkv, D)
    Buf qn, q_rstd, kn, k_rstd;  // q_norm / k_norm outputs before RoPE and their rstd
    Buf q, k;                    // after RoPE
    Buf o, lse;                  // attention output (T, Hq, D), (T, Hq)
    Buf gated;                   // o * sigmoid(gate): (T, Hq*D)
};

struct MlpBlockActs {
    Buf m, rstd;   // post-attention norm: (T, H), (T)
    Buf gate, up;  // (T, I)
    Buf h;         // silu(gate) * up: (T, I)
};

void gdn_block_forward(const Qwen35Config& c, const LayerView& w, const BatchMeta& b,
                       const float* x, float* out, GdnBlockActs& acts);
void gdn_block_backward(const Qwen35Config& c, const LayerView& w, const LayerView& grad,
                        const BatchMeta& b, const float* x, const float* dout, float* dx,
                        const GdnBlockActs& acts);

void attention_block_forward(const Qwen35Config& c, const LayerView& w, const BatchMeta& b,
                             const float* x, float* out, AttentionBlockActs& acts);
void attention_block_backward(const Qwen35Config& c, const LayerView& w, const LayerView& grad,
                              const BatchMeta& b, const float* x, const float* dout, float* dx,
                              const AttentionBlockActs& acts);

void mlp_block_forward(const Qwen35Config& c, const LayerView& w, const BatchMeta& b,
                       const float* x, float* out, MlpBlockActs& acts);
void mlp_block_backward(const Qwen35Config& c, const LayerView& w, const LayerView& grad,
                        const BatchMeta& b, const float* x, const float* dout, float* dx,
                        const MlpBlockActs& acts);

// A projection of layer `w`: y = x W^T, plus its LoRA branch when the layer has one.
void proj_forward(const LayerView& w, Proj p, float* y, const float* x, int64_t rows, int64_t in,
                  int64_t out);
// Its backward: dx written (=; null to skip), the weight's gradient and the LoRA pair's in `grad`
// accumulated (+=).
void proj_backward(const LayerView& w, const LayerView& grad, Proj p, float* dx, const float* dy,
                   const float* x, int64_t rows, int64_t in, int64_t out);

// Helpers shared by the blocks.
inline float* ptr(const Tensor& t) {
    return t.data<float>();
}
inline void add_into(float* dst, const Buf& src) {
    for (size_t i = 0; i < src.size(); ++i) dst[i] += src[i];
}

}  // namespace deltatune
