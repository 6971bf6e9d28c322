// Post-attention RMSNorm + SwiGLU MLP on the CPU reference path; backward mirrors forward.
#include "kernels/mlp/linear.h"
#include "kernels/mlp/swiglu.h"
#include "kernels/norm/rmsnorm.h"
#include "runtime/model/cpu_blocks.h"

namespace deltatune {

void mlp_block_forward(const Qwen35Config& c, const LayerView& w, const BatchMeta& b,
                       const float* x, float* out, MlpBlockActs& acts) {
    const int64_t T = b.tokens, H = c.hidden_size, I = c.intermediate_size;
    acts.m.resize(T * H);
    acts.rstd.resize(T);
    rmsnorm_forward_ref(acts.m.data(), acts.rstd.data(), x, ptr(w.post_norm), T, H,
                        static_cast<float>(c.rms_norm_eps));
    acts.gate.resize(T * I);
    acts.up.resize(T * I);
    acts.h.resize(T * I);
    proj_forward(w, Proj::kGate, acts.gate.data(), acts.m.data(), T, H, I);
    proj_forward(w, Proj::kUp, acts.up.data(), acts.m.data(), T, H, I);
    swiglu_forward_ref(acts.h.data(), acts.gate.data(), acts.up.data(), T * I);
    proj_forward(w, Proj::kDown, out, acts.h.data(), T, I, H);
}

void mlp_block_backward(const Qwen35Config& c, const LayerView& w, const LayerView& grad,
                        const BatchMeta& b, const float* x, const float* dout, float* dx,
                        const MlpBlockActs& acts) {
    const int64_t T = b.tokens, H = c.hidden_size, I = c.intermediate_size;
    Buf dh(T * I), dgate(T * I), dup(T * I), dm(T * H), dm_part(T * H), dx_norm(T * H);
    proj_backward(w, grad, Proj::kDown, dh.data(), dout, acts.h.data(), T, I, H);
    swiglu_backward_ref(dgate.data(), dup.data(), dh.data(), acts.gate.data(), acts.up.data(),
                        T * I);
    proj_backward(w, grad, Proj::kUp, dm.data(), dup.data(), acts.m.data(), T, H, I);
    proj_backward(w, grad, Proj::kGate, dm_part.data(), dgate.data(), acts.m.data(), T, H, I);
    add_into(dm.data(), dm_part);
    rmsnorm_backward_ref(dx_norm.data(), ptr(grad.post_norm), dm.data(), x, ptr(w.post_norm),
                         acts.rstd.data(), T, H);
    add_into(dx, dx_norm);
}

}  // namespace deltatune
