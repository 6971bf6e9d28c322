// Gated DeltaNet block (input RMSNorm, projections, varlen causal conv + SiLU, q/k L2 norm, beta
// and g gates, gated delta rule, gated RMSNorm, out_proj) on the CPU reference path. Conv window
// and recurrent state reset at every document start (inside the kernels). Backward mirrors forward.
#include <cmath>
#include <cstring>

#include "kernels/gdn/causal_conv1d.h"
#include "kernels/gdn/gdn_chunked_rule.h"
#include "kernels/gdn/gdn_gates.h"
#include "kernels/mlp/linear.h"
#include "kernels/norm/gated_rmsnorm.h"
#include "kernels/norm/l2norm.h"
#include "kernels/norm/rmsnorm.h"
#include "runtime/model/cpu_blocks.h"

namespace deltatune {

namespace {

// Copies columns [col, col + width) of a (T, stride) matrix into a contiguous (T, width) one.
void take_columns(float* dst, const float* src, int64_t T, int64_t stride, int64_t col,
                  int64_t width) {
    for (int64_t t = 0; t < T; ++t)
        std::memcpy(dst + t * width, src + t * stride + col, width * sizeof(float));
}

void put_columns(float* dst, const float* src, int64_t T, int64_t stride, int64_t col,
                 int64_t width) {
    for (int64_t t = 0; t < T; ++t)
        std::memcpy(dst + t * stride + col, src + t * width, width * sizeof(float));
}

}  // namespace

void gdn_block_forward(const Qwen35Config& c, const LayerView& w, const BatchMeta& b,
                       const float* x, float* out, GdnBlockActs& acts) {
    const int64_t T = b.tokens, H = c.hidden_size, C = c.conv_dim();
    const int64_t Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
    const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
    const int64_t KD = c.key_dim(), VD = c.value_dim();
    const float eps = static_cast<float>(c.rms_norm_eps);

    acts.a.resize(T * H);
    acts.rstd.resize(T);
    rmsnorm_forward_ref(acts.a.data(), acts.rstd.data(), x, ptr(w.input_norm), T, H, eps);

    acts.mixed.resize(T * C);
    acts.z.resize(T * VD);
    acts.b.resize(T * Hv);
    acts.a_raw.resize(T * Hv);
    proj_forward(w, Proj::kQkv, acts.mixed.data(), acts.a.data(), T, H, C);
    proj_forward(w, Proj::kZ, acts.z.data(), acts.a.data(), T, H, VD);
    proj_forward(w, Proj::kB, acts.b.data(), acts.a.data(), T, H, Hv);
    proj_forward(w, Proj::kA, acts.a_raw.data(), acts.a.data(), T, H, Hv);

    acts.conv.resize(T * C);
    causal_conv1d_forward_ref(acts.conv.data(), acts.mixed.data(), ptr(w.conv_w), b.cu_seqlens,
                              b.num_docs, C, c.linear_conv_kernel_dim);
    acts.q.resize(T * KD);
    acts.k.resize(T * KD);
    acts.v.resize(T * VD);
    take_columns(acts.q.data(), acts.conv.data(), T, C, 0, KD);
    take_columns(acts.k.data(), acts.conv.data(), T, C, KD, KD);
    take_columns(acts.v.data(), acts.conv.data(), T, C, 2 * KD, VD);

    acts.qn.resize(T * KD);
    acts.kn.resize(T * KD);
    acts.q_rnorm.resize(T * Hk);
    acts.k_rnorm.resize(T * Hk);
    l2norm_forward_ref(acts.qn.data(), acts.q_rnorm.data(), acts.q.data(), T * Hk, dk, 1e-6f);
    l2norm_forward_ref(acts.kn.data(), acts.k_rnorm.data(), acts.k.data(), T * Hk, dk, 1e-6f);

    acts.beta.resize(T * Hv);
    acts.g.resize(T * Hv);
    gdn_gates_forward_ref(acts.beta.data(), acts.g.data(), acts.b.data(), acts.a_raw.data(),
                          ptr(w.A_log), ptr(w.dt_bias), T, Hv);

    acts.o.resize(T * VD);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    gated_delta_rule_forward_ref(acts.o.data(), acts.qn.data(), acts.kn.data(), acts.v.data(),
                                 acts.g.data(), acts.beta.data(), b.cu_seqlens, b.num_docs, Hk, Hv,
                                 dk, dv, scale);

    acts.norm_rstd.resize(T * Hv);
    acts.normed.resize(T * VD);
    gated_rmsnorm_forward_ref(acts.normed.data(), acts.norm_rstd.data(), acts.o.data(),
                              acts.z.data(), ptr(w.gdn_norm), T * Hv, dv, eps);
    proj_forward(w, Proj::kOut, out, acts.normed.data(), T, VD, H);
}

void gdn_block_backward(const Qwen35Config& c, const LayerView& w, const LayerView& grad,
                        const BatchMeta& b, const float* x, const float* dout, float* dx,
                        const GdnBlockActs& acts) {
    const int64_t T = b.tokens, H = c.hidden_size, C = c.conv_dim();
    const int64_t Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
    const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
    const int64_t KD = c.key_dim(), VD = c.value_dim();

    Buf dnormed(T * VD), d_o(T * VD), dz(T * VD);
    proj_backward(w, grad, Proj::kOut, dnormed.data(), dout, acts.normed.data(), T, VD, H);
    gated_rmsnorm_backward_ref(d_o.data(), dz.data(), ptr(grad.gdn_norm), dnormed.data(),
                               acts.o.data(), acts.z.data(), ptr(w.gdn_norm), acts.norm_rstd.data(),
                               T * Hv, dv);

    Buf dqn(T * KD), dkn(T * KD), dv_(T * VD), dg(T * Hv), dbeta(T * Hv);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    gated_delta_rule_backward_ref(dqn.data(), dkn.data(), dv_.data(), dg.data(), dbeta.data(),
                                  d_o.data(), acts.qn.data(), acts.kn.data(), acts.v.data(),
                                  acts.g.data(), acts.beta.data(), b.cu_seqlens, b.num_docs, Hk, Hv,
                                  dk, dv, scale);

    Buf db(T * Hv), da_raw(T * Hv);
    gdn_gates_backward_ref(db.data(), da_raw.data(), ptr(grad.A_log), ptr(grad.dt_bias),
                           dbeta.data(), dg.data(), acts.b.data(), acts.a_raw.data(), ptr(w.A_log),
                           ptr(w.dt_bias), T, Hv);

    Buf dq(T * KD), dk_(T * KD);
    l2norm_backward_ref(dq.data(), dqn.data(), acts.qn.data(), acts.q_rnorm.data(), T * Hk, dk);
    l2norm_backward_ref(dk_.data(), dkn.data(), acts.kn.data(), acts.k_rnorm.data(), T * Hk, dk);

    Buf dconv(T * C), dmixed(T * C);
    put_columns(dconv.data(), dq.data(), T, C, 0, KD);
    put_columns(dconv.data(), dk_.data(), T, C, KD, KD);
    put_columns(dconv.data(), dv_.data(), T, C, 2 * KD, VD);
    causal_conv1d_backward_ref(dmixed.data(), ptr(grad.conv_w), dconv.data(), acts.mixed.data(),
                               ptr(w.conv_w), b.cu_seqlens, b.num_docs, C,
                               c.linear_conv_kernel_dim);

    Buf da(T * H), part(T * H);
    proj_backward(w, grad, Proj::kQkv, da.data(), dmixed.data(), acts.a.data(), T, H, C);
    proj_backward(w, grad, Proj::kZ, part.data(), dz.data(), acts.a.data(), T, H, VD);
    add_into(da.data(), part);
    proj_backward(w, grad, Proj::kB, part.data(), db.data(), acts.a.data(), T, H, Hv);
    add_into(da.data(), part);
    proj_backward(w, grad, Proj::kA, part.data(), da_raw.data(), acts.a.data(), T, H, Hv);
    add_into(da.data(), part);

    Buf dx_norm(T * H);
    rmsnorm_backward_ref(dx_norm.data(), ptr(grad.input_norm), da.data(), x, ptr(w.input_norm),
                         acts.rstd.data(), T, H);
    add_into(dx, dx_norm);
}

}  // namespace deltatune
