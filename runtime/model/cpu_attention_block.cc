// Gated full-attention block (input RMSNorm, q/k/v projections with the per-head output gate in
// q_proj, q/k zero-centred norms, partial RoPE, varlen causal GQA attention, sigmoid gate,
// o_proj) on the CPU reference path. Backward mirrors forward.
#include <cmath>
#include <cstring>

#include "kernels/attention/attention.h"
#include "kernels/attention/rope.h"
#include "kernels/mlp/linear.h"
#include "kernels/norm/rmsnorm.h"
#include "runtime/model/cpu_blocks.h"

namespace deltatune {

void attention_block_forward(const Qwen35Config& c, const LayerView& w, const BatchMeta& b,
                             const float* x, float* out, AttentionBlockActs& acts) {
    const int64_t T = b.tokens, H = c.hidden_size, D = c.head_dim;
    const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
    const float eps = static_cast<float>(c.rms_norm_eps);

    acts.a.resize(T * H);
    acts.rstd.resize(T);
    rmsnorm_forward_ref(acts.a.data(), acts.rstd.data(), x, ptr(w.input_norm), T, H, eps);

    // q_proj rows are per head [query (D) | gate (D)]; split them apart.
    Buf qg(T * Hq * 2 * D);
    proj_forward(w, Proj::kQ, qg.data(), acts.a.data(), T, H, 2 * Hq * D);
    acts.q_raw.resize(T * Hq * D);
    acts.gate.resize(T * Hq * D);
    for (int64_t r = 0; r < T * Hq; ++r) {
        std::memcpy(&acts.q_raw[r * D], &qg[r * 2 * D], D * sizeof(float));
        std::memcpy(&acts.gate[r * D], &qg[r * 2 * D + D], D * sizeof(float));
    }
    acts.k_raw.resize(T * Hkv * D);
    acts.v.resize(T * Hkv * D);
    proj_forward(w, Proj::kK, acts.k_raw.data(), acts.a.data(), T, H, Hkv * D);
    proj_forward(w, Proj::kV, acts.v.data(), acts.a.data(), T, H, Hkv * D);

    acts.qn.resize(T * Hq * D);
    acts.q_rstd.resize(T * Hq);
    acts.kn.resize(T * Hkv * D);
    acts.k_rstd.resize(T * Hkv);
    rmsnorm_forward_ref(acts.qn.data(), acts.q_rstd.data(), acts.q_raw.data(), ptr(w.q_norm),
                        T * Hq, D, eps);
    rmsnorm_forward_ref(acts.kn.data(), acts.k_rstd.data(), acts.k_raw.data(), ptr(w.k_norm),
                        T * Hkv, D, eps);
    acts.q = acts.qn;
    acts.k = acts.kn;
    rope_forward_ref(acts.q.data(), b.position_ids, T, Hq, D, c.rotary_dim(), c.rope_theta);
    rope_forward_ref(acts.k.data(), b.position_ids, T, Hkv, D, c.rotary_dim(), c.rope_theta);

    acts.o.resize(T * Hq * D);
    acts.lse.resize(T * Hq);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    attention_forward_ref(acts.o.data(), acts.lse.data(), acts.q.data(), acts.k.data(),
                          acts.v.data(), b.cu_seqlens, b.num_docs, Hq, Hkv, D, scale);
    acts.gated.resize(T * Hq * D);
    output_gate_forward_ref(acts.gated.data(), acts.o.data(), acts.gate.data(), T * Hq * D);
    proj_forward(w, Proj::kO, out, acts.gated.data(), T, Hq * D, H);
}

void attention_block_backward(const Qwen35Config& c, const LayerView& w, const LayerView& grad,
                              const BatchMeta& b, const float* x, const float* dout, float* dx,
                              const AttentionBlockActs& acts) {
    const int64_t T = b.tokens, H = c.hidden_size, D = c.head_dim;
    const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;

    Buf dgated(T * Hq * D), d_o(T * Hq * D), dgate(T * Hq * D);
    proj_backward(w, grad, Proj::kO, dgated.data(), dout, acts.gated.data(), T, Hq * D, H);
    output_gate_backward_ref(d_o.data(), dgate.data(), dgated.data(), acts.o.data(),
                             acts.gate.data(), T * Hq * D);

    Buf dq(T * Hq * D), dk(T * Hkv * D), dv(T * Hkv * D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    attention_backward_ref(dq.data(), dk.data(), dv.data(), d_o.data(), acts.q.data(),
                           acts.k.data(), acts.v.data(), acts.o.data(), acts.lse.data(),
                           b.cu_seqlens, b.num_docs, Hq, Hkv, D, scale);
    rope_backward_ref(dq.data(), b.position_ids, T, Hq, D, c.rotary_dim(), c.rope_theta);
    rope_backward_ref(dk.data(), b.position_ids, T, Hkv, D, c.rotary_dim(), c.rope_theta);

    Buf dq_raw(T * Hq * D), dk_raw(T * Hkv * D);
    rmsnorm_backward_ref(dq_raw.data(), ptr(grad.q_norm), dq.data(), acts.q_raw.data(),
                         ptr(w.q_norm), acts.q_rstd.data(), T * Hq, D);
    rmsnorm_backward_ref(dk_raw.data(), ptr(grad.k_norm), dk.data(), acts.k_raw.data(),
                         ptr(w.k_norm), acts.k_rstd.data(), T * Hkv, D);

    Buf dqg(T * Hq * 2 * D);
    for (int64_t r = 0; r < T * Hq; ++r) {
        std::memcpy(&dqg[r * 2 * D], &dq_raw[r * D], D * sizeof(float));
        std::memcpy(&dqg[r * 2 * D + D], &dgate[r * D], D * sizeof(float));
    }
    Buf da(T * H), part(T * H);
    proj_backward(w, grad, Proj::kQ, da.data(), dqg.data(), acts.a.data(), T, H, 2 * Hq * D);
    proj_backward(w, grad, Proj::kK, part.data(), dk_raw.data(), acts.a.data(), T, H, Hkv * D);
    add_into(da.data(), part);
    proj_backward(w, grad, Proj::kV, part.data(), dv.data(), acts.a.data(), T, H, Hkv * D);
    add_into(da.data(), part);

    Buf dx_norm(T * H);
    rmsnorm_backward_ref(dx_norm.data(), ptr(grad.input_norm), da.data(), x, ptr(w.input_norm),
                         acts.rstd.data(), T, H);
    add_into(dx, dx_norm);
}

}  // namespace deltatune
