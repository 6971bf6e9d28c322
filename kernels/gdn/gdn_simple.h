// Reference-grade CUDA kernels for the Gated DeltaNet core (causal conv1d + SiLU, q/k L2 norm,
// beta/g gates, gated delta rule, gated RMSNorm): straightforward, correct, deterministic, and
// slow on long documents (the delta rule runs token by token). They run where the fused ones
// cannot (runtime/model/kernel_registry.cc says when and why, and reports them as non-fused, so a
// strict GPU job refuses them). Oracles: the *_ref.cc beside them.
// Math and intermediates are fp32; bf16 only where a GEMM reads or writes the tensor. Every
// document starts from a zero conv window and a zero state. All pointers are device pointers,
// launches are stream-ordered and never synchronise. Gradient contract as in the references:
// activation gradients written (=), weight gradients accumulated (+=) in a fixed order.
#pragma once
#include <cstddef>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace deltatune {

// out (tokens, channels) fp32 = silu(depthwise causal conv(x)); x (tokens, channels) bf16;
// w (channels, kernel) fp32; cu_seqlens (num_docs + 1) on the device.
cudaError_t gdn_conv_silu_forward_simple(float* out, const __nv_bfloat16* x, const float* w,
                                         const int32_t* cu_seqlens, int64_t num_docs,
                                         int64_t tokens, int64_t channels, int64_t kernel,
                                         cudaStream_t stream);
// dx (tokens, channels) bf16 written; dw (channels, kernel) fp32 accumulated; dout fp32.
cudaError_t gdn_conv_silu_backward_simple(__nv_bfloat16* dx, float* dw, const float* dout,
                                          const __nv_bfloat16* x, const float* w,
                                          const int32_t* cu_seqlens, int64_t num_docs,
                                          int64_t tokens, int64_t channels, int64_t kernel,
                                          cudaStream_t stream);

// L2 norm of `heads` rows of `dim` per token, read at x + t * x_token_stride + h * dim:
// out (tokens, heads, dim) = x * rnorm, rnorm = 1 / sqrt(sum x^2 + eps), saved (tokens, heads).
cudaError_t gdn_l2norm_forward_simple(float* out, float* rnorm, const float* x,
                                      int64_t x_token_stride, int64_t tokens, int64_t heads,
                                      int64_t dim, float eps, cudaStream_t stream);
// dx written at the strides of x; dout and out are contiguous (tokens, heads, dim).
cudaError_t gdn_l2norm_backward_simple(float* dx, int64_t dx_token_stride, const float* dout,
                                       const float* out, const float* rnorm, int64_t tokens,
                                       int64_t heads, int64_t dim, cudaStream_t stream);

// beta = sigmoid(b), g = -exp(A_log[h]) * softplus(a + dt_bias[h]); b, a (tokens, heads) bf16;
// beta, g (tokens, heads) fp32; A_log, dt_bias (heads) fp32.
cudaError_t gdn_gates_forward_simple(float* beta, float* g, const __nv_bfloat16* b,
                                     const __nv_bfloat16* a, const float* A_log,
                                     const float* dt_bias, int64_t tokens, int64_t heads,
                                     cudaStream_t stream);
// db, da bf16 written; dA_log, ddt_bias fp32 accumulated (one block per head, fixed order).
cudaError_t gdn_gates_backward_simple(__nv_bfloat16* db, __nv_bfloat16* da, float* dA_log,
                                      float* ddt_bias, const float* dbeta, const float* dg,
                                      const __nv_bfloat16* b, const __nv_bfloat16* a,
                                      const float* A_log, const float* dt_bias, int64_t tokens,
                                      int64_t heads, cudaStream_t stream);

// The gated delta rule (gdn_chunked_rule.h's recurrence), one thread block per (document, value
// head), each thread owning one column of the (dk x dv) state. q, k (tokens, k_heads, dk) fp32,
// already L2-normalised; v read at v + t * v_token_stride + h * dv; g, beta (tokens, v_heads);
// out (tokens, v_heads, dv). dk, dv at most 1024.
struct GdnRuleArgs {
    const float* q = nullptr;
    const float* k = nullptr;
    const float* v = nullptr;
    int64_t v_token_stride = 0;
    const float* g = nullptr;
    const float* beta = nullptr;
    const int32_t* cu_seqlens = nullptr;  // device
    int64_t num_docs = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0;
    float scale = 0.0f;
};
bool gdn_rule_simple_supported(const GdnRuleArgs& a);
size_t gdn_rule_forward_simple_workspace_bytes(const GdnRuleArgs& a);
cudaError_t gdn_rule_forward_simple(float* out, const GdnRuleArgs& a, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream);
// Recomputes the states (checkpointed every few tokens, re-run forward inside each stretch) and
// runs the recurrence backwards. dq, dk (tokens, k_heads, dk) are summed over each key head's
// value heads in a fixed order; dv is written at v's strides; dg, dbeta (tokens, v_heads).
size_t gdn_rule_backward_simple_workspace_bytes(const GdnRuleArgs& a);
cudaError_t gdn_rule_backward_simple(float* dq, float* dk, float* dv, float* dg, float* dbeta,
                                     const float* dout, const GdnRuleArgs& a, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream);

// Gated RMSNorm: out = w * (x * rstd) * silu(z) per row of `cols`; x fp32, z bf16, w fp32 plain
// weight; out bf16; rstd (rows) fp32, saved.
cudaError_t gdn_gated_rmsnorm_forward_simple(__nv_bfloat16* out, float* rstd, const float* x,
                                             const __nv_bfloat16* z, const float* w, int64_t rows,
                                             int64_t cols, float eps, cudaStream_t stream);
// dx fp32 and dz bf16 written; dw (cols) fp32 accumulated (one block per column, fixed order).
cudaError_t gdn_gated_rmsnorm_backward_simple(float* dx, __nv_bfloat16* dz, float* dw,
                                              const __nv_bfloat16* dout, const float* x,
                                              const __nv_bfloat16* z, const float* w,
                                              const float* rstd, int64_t rows, int64_t cols,
                                              cudaStream_t stream);

}  // namespace deltatune
#endif
