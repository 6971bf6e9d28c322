// The gated delta rule, per-token recurrent form (the oracle for the chunked CUDA kernel). Per
// document and value head j (reading key head j / r, r = v_heads / k_heads), state S (dk x dv) = 0
// at each document start:
//   S' = exp(g_t) S;  p = S'^T k_t;  delta = beta_t (v_t - p);  S = S' + k_t delta^T;
//   o_t = S^T (scale * q_t)
// q and k arrive already L2-normalised; `scale` (dk^-1/2 in the model) is applied to q here.
// Gradient contract: all gradients are written (=); dq, dk sum over the value heads of a group.
#pragma once
#include <cstddef>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

// q, k: (tokens, k_heads, dk); v, out: (tokens, v_heads, dv); g, beta: (tokens, v_heads).
template <typename T>
void gated_delta_rule_forward_ref(T* out, const T* q, const T* k, const T* v, const T* g,
                                  const T* beta, const int32_t* cu_seqlens, int64_t num_docs,
                                  int64_t k_heads, int64_t v_heads, int64_t dk, int64_t dv,
                                  T scale);
// Recomputes the states of each (document, head) and runs the recurrence backwards.
template <typename T>
void gated_delta_rule_backward_ref(T* dq, T* dk_out, T* dv_out, T* dg, T* dbeta, const T* dout,
                                   const T* q, const T* k, const T* v, const T* g, const T* beta,
                                   const int32_t* cu_seqlens, int64_t num_docs, int64_t k_heads,
                                   int64_t v_heads, int64_t dk, int64_t dv, T scale);

// Shared memory per block the chunked kernels need without the sm_90a code (32-column mma.sync
// recurrences; gdn_chunked_rule_backward.cu asserts the figure): an A100's 163 KiB serve, a GPU
// with 99 KiB does not. The sm_90a code fits Hopper's 227 KiB.
inline constexpr int64_t kGatedDeltaRulePortableSmemBytes = 158720;

#if DELTATUNE_HAVE_CUDA
// CUDA, chunked (64 tokens) with the gates and the q/k L2 norm fused (device pointers,
// stream-ordered). Unlike the reference, q and k arrive raw and are normalised inside
// (x / sqrt(sum x^2 + 1e-6)), and the gates come as their pre-activations:
//   beta = sigmoid(b),  g = -exp(A_log[j]) * softplus(a + dt_bias[j])   (fp32).
// q, k: (tokens, k_heads, 128) bf16; v, out: (tokens, v_heads, 128) bf16; a, b: (tokens,
// v_heads) bf16; A_log, dt_bias: (v_heads) fp32; cu_seqlens: (num_docs + 1) int32 on the device.
// Chunks are fixed 64-token windows of the packed stream; a chunk may hold several documents, and
// every matrix that would couple two documents is masked, so the state resets at each start.
// State math in fp32, chunk-local matrix products on tensor cores (bf16 operands, fp32
// accumulation). `workspace` holds the per-chunk intermediates (see the *_workspace_bytes
// functions); no host synchronisation.
bool gated_delta_rule_supported(int64_t tokens, int64_t k_heads, int64_t v_heads, int64_t dk,
                                int64_t dv);

// One layer's rule inputs (device pointers, shapes as above).
struct GatedDeltaRuleArgs {
    const __nv_bfloat16* q = nullptr;     // (tokens, k_heads, 128), raw (normalised inside)
    const __nv_bfloat16* k = nullptr;     // (tokens, k_heads, 128), raw
    const __nv_bfloat16* v = nullptr;     // (tokens, v_heads, 128)
    const __nv_bfloat16* a = nullptr;     // (tokens, v_heads), the decay gate's pre-activation
    const __nv_bfloat16* b = nullptr;     // (tokens, v_heads), beta's pre-activation
    const float* A_log = nullptr;         // (v_heads)
    const float* dt_bias = nullptr;       // (v_heads)
    const int32_t* cu_seqlens = nullptr;  // (num_docs + 1), device
    int64_t num_docs = 0, tokens = 0, k_heads = 0, v_heads = 0;
    // Elements from one token's q (k, v) row to the next, shared by the three (column blocks of
    // one matrix, as the model's conv output holds them), a multiple of 8; 0: each dense
    // (k_heads * 128 for q and k, v_heads * 128 for v). q, k and v are 16-byte aligned.
    int64_t qkv_stride = 0;
    float scale = 0.0f;  // applied to q (dk^-1/2 in the model)
};

// The rule's gradients: dq, dk (summed over each key head's value heads), dv, da, db written (=)
// in bf16 with the shapes of their inputs; dA_log, ddt_bias (v_heads, fp32) accumulated (+=)
// through a deterministic per-chunk reduction.
struct GatedDeltaRuleGrads {
    __nv_bfloat16 *dq = nullptr, *dk = nullptr, *dv = nullptr, *da = nullptr, *db = nullptr;
    float *dA_log = nullptr, *ddt_bias = nullptr;
    int64_t dqkv_stride = 0;  // the row stride of dq, dk and dv, as qkv_stride's; 0: dense
};

size_t gated_delta_rule_forward_workspace_bytes(int64_t tokens, int64_t v_heads);
cudaError_t gated_delta_rule_forward(__nv_bfloat16* out, const GatedDeltaRuleArgs& args,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream);
// Recomputes the forward's intermediates, then writes the gradients.
size_t gated_delta_rule_backward_workspace_bytes(int64_t tokens, int64_t v_heads);
cudaError_t gated_delta_rule_backward(const GatedDeltaRuleGrads& grads, const __nv_bfloat16* dout,
                                      const GatedDeltaRuleArgs& args, void* workspace,
                                      size_t workspace_bytes, cudaStream_t stream);

// Training: a forward that also keeps what the backward needs (the chunk intermediates, each
// chunk's entering state and Vn) in `saved` (gated_delta_rule_saved_bytes; the caller holds it
// until the backward), and the backward that starts from it instead of recomputing them (its own
// scratch: gated_delta_rule_backward_scratch_bytes). Same results as the pair above.
size_t gated_delta_rule_saved_bytes(int64_t tokens, int64_t v_heads);
size_t gated_delta_rule_backward_scratch_bytes(int64_t tokens, int64_t v_heads);
cudaError_t gated_delta_rule_forward_saving(__nv_bfloat16* out, const GatedDeltaRuleArgs& args,
                                            void* saved, size_t saved_bytes, cudaStream_t stream);
cudaError_t gated_delta_rule_backward_from_saved(const GatedDeltaRuleGrads& grads,
                                                 const __nv_bfloat16* dout,
                                                 const GatedDeltaRuleArgs& args, const void* saved,
                                                 void* workspace, size_t workspace_bytes,
                                                 cudaStream_t stream);
#endif

}  // namespace deltatune
