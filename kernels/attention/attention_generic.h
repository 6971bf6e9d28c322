// Gated varlen causal GQA attention for any head_dim up to 256: the generic CUDA fallback beside
// attention_flash.cu (which is head_dim 256 only), for small test models. Same arguments and
// outputs as gated_attention_forward / gated_attention_backward (attention.h); one thread block
// per (query token, head) or (key token, kv head), fp32 softmax and accumulation, deterministic,
// no (tokens x tokens) matrix in memory. Not fast: the registry reports it as non-fused.
#pragma once
#include <cstddef>

#include "kernels/attention/attention.h"

#if DELTATUNE_HAVE_CUDA
namespace deltatune {

bool gated_attention_generic_supported(const GatedAttentionArgs& a);
cudaError_t gated_attention_forward_generic(__nv_bfloat16* y, __nv_bfloat16* o, float* lse,
                                            const GatedAttentionArgs& a, cudaStream_t stream);
// Workspace: dO = dy * sigmoid(gate) and its row dot with o, in fp32.
size_t gated_attention_backward_generic_workspace_bytes(const GatedAttentionArgs& a);
cudaError_t gated_attention_backward_generic(__nv_bfloat16* dq, __nv_bfloat16* dk,
                                             __nv_bfloat16* dv, __nv_bfloat16* dgate,
                                             const __nv_bfloat16* dy, const __nv_bfloat16* o,
                                             const float* lse, const GatedAttentionArgs& a,
                                             void* workspace, size_t workspace_bytes,
                                             cudaStream_t stream);

}  // namespace deltatune
#endif
