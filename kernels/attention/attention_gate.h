// The gated attention op's pieces around the attention core, for head_dim 256: Qwen3.5's sigmoid
// output gate (y = o * sigmoid(gate)) forward and backward as standalone passes, and the ragged
// offsets that describe packed documents to cuDNN. attention_flash.cu fuses the gate's forward
// into its epilogue and runs attention_gate_backward as its backward's first pass;
// attention_cudnn.cc, whose attention core is cuDNN's, runs both passes around it.
// References: output_gate_forward_ref / output_gate_backward_ref (attention.h).
#pragma once
#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace deltatune {

// Where the gate of head h of token t starts: gate + t * token_stride + h * head_stride (256
// contiguous values; strides multiples of 8 so that rows stay 16-byte aligned).
struct AttentionGateLayout {
    const __nv_bfloat16* gate = nullptr;
    int64_t token_stride = 0, head_stride = 0;
};

// y = o * sigmoid(gate) over (tokens, q_heads, 256); y and o contiguous.
cudaError_t attention_gate_forward(__nv_bfloat16* y, const __nv_bfloat16* o, AttentionGateLayout g,
                                   int64_t tokens, int64_t q_heads, cudaStream_t stream);

// d_o = round_bf16(dy * sigmoid(gate)), dgate = dy * o * sigmoid * (1 - sigmoid) (written at the
// gate's strides, 16-byte aligned as the gate is), and, when `delta` is not null, delta[t, h] =
// sum_c d_o * o: the flash backward's row term, from the rounded d_o.
cudaError_t attention_gate_backward(__nv_bfloat16* d_o, float* delta, __nv_bfloat16* dgate,
                                    const __nv_bfloat16* dy, const __nv_bfloat16* o,
                                    AttentionGateLayout g, int64_t tokens, int64_t q_heads,
                                    cudaStream_t stream);
// The same from the gated output y = o * sigmoid(gate) instead of o (the wgmma forward saves
// only y): dgate = dy * y * (1 - sigmoid), delta = sum_c d_o * (y / sigmoid) (equal to the
// above in real numbers; each differs from it by bf16 roundings of the saved tensor).
cudaError_t attention_gate_backward_from_y(__nv_bfloat16* d_o, float* delta, __nv_bfloat16* dgate,
                                           const __nv_bfloat16* dy, const __nv_bfloat16* y,
                                           AttentionGateLayout g, int64_t tokens, int64_t q_heads,
                                           cudaStream_t stream);

// From cu_seqlens (num_docs + 1, device): for batch slot i < slots, seq_len[i] = the length of
// document i (0 for the slots past num_docs), and, for i <= slots, element offsets of its first
// token in (tokens, heads, head_dim) tensors: q_off = start * q_heads * head_dim, kv_off = start *
// kv_heads * head_dim, stats_off = start * q_heads (slots past num_docs start at `tokens`). The
// offsets are int64: cuDNN 9.6 and later read ragged offsets as 64-bit integers.
cudaError_t attention_ragged_offsets(int32_t* seq_len, int64_t* q_off, int64_t* kv_off,
                                     int64_t* stats_off, const int32_t* cu_seqlens,
                                     int64_t num_docs, int64_t slots, int64_t q_heads,
                                     int64_t kv_heads, int64_t head_dim, cudaStream_t stream);

}  // namespace deltatune
#endif
