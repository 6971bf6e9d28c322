// Qwen3.5 full attention's q/k preparation, fused: zero-centred RMSNorm over each head
// (q_norm / k_norm, one weight of head_dim shared by all heads), then partial rotate-half RoPE on
// the first rotary_dim channels (rope.h conventions), fp32 math in between, one bf16 rounding.
// The CPU oracle is rmsnorm_forward_ref over (tokens * heads, head_dim) rows followed by
// rope_forward_ref. Gradient contract: dx is written (=), dw is accumulated (+=).
#pragma once
#include <cstddef>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

#if DELTATUNE_HAVE_CUDA
// head_dim a multiple of 8 up to 256; rotary_dim even, at most head_dim and at most 64.
bool qk_norm_rope_supported(int64_t head_dim, int64_t rotary_dim);

// Head h of token t is read at x + t * x_token_stride + h * x_head_stride (head_dim contiguous),
// so q can be read straight out of q_proj's interleaved (tokens, heads, 2 * head_dim) output.
// out: (tokens, heads, head_dim) contiguous; w: (head_dim); rstd: (tokens, heads) fp32, saved;
// positions: (tokens), restarting per document.
cudaError_t qk_norm_rope_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x,
                                 int64_t x_token_stride, int64_t x_head_stride,
                                 const __nv_bfloat16* w, const int32_t* positions, int64_t tokens,
                                 int64_t heads, int64_t head_dim, int64_t rotary_dim, double theta,
                                 float eps, cudaStream_t stream);

// dx uses the same strides as x (writing only the head_dim channels of each head); dout is
// contiguous (tokens, heads, head_dim); dw (head_dim) fp32 is accumulated deterministically.
size_t qk_norm_rope_backward_workspace_bytes(int64_t tokens, int64_t heads, int64_t head_dim);
cudaError_t qk_norm_rope_backward(__nv_bfloat16* dx, float* dw, const __nv_bfloat16* dout,
                                  const __nv_bfloat16* x, int64_t x_token_stride,
                                  int64_t x_head_stride, const __nv_bfloat16* w, const float* rstd,
                                  const int32_t* positions, int64_t tokens, int64_t heads,
                                  int64_t head_dim, int64_t rotary_dim, double theta,
                                  void* workspace, size_t workspace_bytes, cudaStream_t stream);
#endif

}  // namespace deltatune
