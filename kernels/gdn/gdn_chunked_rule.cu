// Chunked gated delta rule (chunk 64, dk = dv = 128) with the gates and the q/k L2 norm fused,
// forward and backward, in the WY/UT form of flash-linear-attention's chunk_gated_delta_rule.
//
// Chunks are fixed 64-token windows of the packed stream. Inside chunk c (rows r, s), with
// Gamma = the chunk-local cumulative sum of g, E[r,s] = exp(Gamma_r - Gamma_s), same(r,s) = same
// document, f_r = "row r continues the document that was running before the chunk", l_s = "row s
// is in the chunk's last document":
//   A   = strict_lower_same(diag(beta) Kn Kn^T * E),  T = (I + A)^-1
//   W   = T diag(beta exp(Gamma) f) Kn,  U = T diag(beta) V
//   Qd  = scale diag(exp(Gamma) f) Qn,   Kd = diag(exp(Gamma_L - Gamma) l) Kn
//   Aqk = scale lower_same(Qn Kn^T * E),  gam = f_L exp(Gamma_L)        (L = last valid row)
// and the sequential part over chunks, with the running state S (dk x dv):
//   Vn = U - W S;  O = Qd S + Aqk Vn;  S <- gam S + Kd^T Vn.
// A row whose document started inside the chunk has f = 0, so it never reads the previous state,
// and the state leaving a chunk holds only its last document: the reset needs no extra work.
//
// Kernels: chunk_prep (parallel over chunks and heads) writes W, U, Qd, Kd, Aqk, T and gam; the
// recurrence runs per (value head, 32- or 64-column slice of dv) over all chunks with the fp32
// state in registers (gdn_chunked_rule_recurrence.cuh). The backward recomputes both when the
// forward was not saved (a saving forward also keeps every chunk's entering state and Vn), runs
// the reverse recurrence for dVn and each chunk's leaving-state gradient, then per chunk forms
// the gradients of W, Qd, Kd, Aqk and gam (state_grads) and pushes them back through T, the
// masks, the gates and the L2 norm (chunk_prep_backward, qk_finalize, gate_reduce). W, Qd, Kd,
// Aqk and T, which only products read, are kept in bf16 (so are U, the saved states and Vn, and
// the backward's dVn and dW). Products: bf16 m16n8k16 mma.sync throughout, on bf16 operand
// tiles (Qn, Kn, V and the scaled T in chunk_prep; bf16 shadows of the fp32 state and of Vn in
// the recurrences; state_grads and chunk_prep_backward, gdn_chunked_rule_prep_backward.cuh),
// as flash-linear-attention keeps these operands. Masks, gates and the inverse are fp32, every
// accumulation is fp32 and every reduction has a fixed order.
#include "kernels/common/cuda_utils.cuh"
#include "kernels/gdn/gdn_chunked_rule_recurrence.cuh"

namespace deltatune {

// launchers

bool gated_delta_rule_supported(int64_t tokens, int64_t k_heads, int64_t v_heads, int64_t dk,
                                int64_t dv) {
    return tokens >= 0 && tokens < (int64_t{1} << 30) && k_heads > 0 && v_heads > 0 &&
           v_heads % k_heads == 0 && v_heads < 65536 && dk == kD && dv == kD;
}

size_t gated_delta_rule_forward_workspace_bytes(int64_t tokens, int64_t v_heads) {
    size_t bytes = 0;
    carve(nullptr, tokens, v_heads, false, &bytes);
    return bytes;
}

size_t gated_delta_rule_backward_workspace_bytes(int64_t tokens, int64_t v_heads) {
    size_t bytes = 0;
    carve(nullptr, tokens, v_heads, true, &bytes);
    return bytes;
}

cudaError_t gated_delta_rule_forward(__nv_bfloat16* out, const GatedDeltaRuleArgs& args,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (!args_supported(args)) return cudaErrorInvalidValue;
    if (args.tokens == 0) return cudaSuccess;
    if (workspace_bytes < gated_delta_rule_forward_workspace_bytes(args.tokens, args.v_heads)) {
        return cudaErrorInvalidValue;
    }
    const Ws w = carve(workspace, args.tokens, args.v_heads, false, nullptr);
    return launch_forward(out, /*save_states=*/false, w, args, stream);
}

}  // namespace deltatune
