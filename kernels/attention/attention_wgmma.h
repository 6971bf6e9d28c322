// Gated varlen causal GQA attention forward for head_dim 256 on Hopper's warpgroup tensor-core
// instructions (wgmma, sm_90a) and the bulk tensor copy engine (TMA): the FlashAttention-3 design
// (a producer thread streams K/V tiles through shared-memory rings on mbarriers; two consumer
// warpgroups of 64 query rows run S = Q K^T and O += P V as wgmma, P straight from registers,
// the softmax of one tile overlapping the previous tile's product, the two warpgroups taking
// turns), persistent over a longest-first list of (128-row query tile, head) items, with the
// sigmoid output gate fused into the epilogue. Same inputs, outputs and saved lse as
// gated_attention_forward (attention.h); its reference is attention_ref.cc. The model's default
// forward (DELTATUNE_ATTENTION=wgmma, the default); its gated op beats cuDNN's SDPA plus the
// gate's pass on packed batches (tests/bench/attention_bench.cc; docs/performance.md "Measured
// choices").
//
// Query tiles of 128 rows never straddle documents (a batch of many tiny documents wastes most
// of each tile; the packing makes real documents). Nondeterminism: none in the results (the
// item order only changes which SM computes a tile).
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cstddef>

#include "kernels/attention/attention.h"

namespace deltatune {

// Device workspace of gated_attention_forward_wgmma (the tile list), from host-known sizes.
size_t gated_attention_forward_wgmma_workspace_bytes(const GatedAttentionArgs& a);

// As gated_attention_forward, except that o may be null: then only y and lse are written, which
// is all gated_attention_backward_wgmma needs (it takes y), saving a write of o and the memory
// that would keep it. `workspace` (16-byte aligned) holds at least the bytes above; y, and o
// when given, 16-byte aligned. cudaErrorInvalidValue for shapes gated_attention_supported rejects,
// a short or misaligned workspace or output; cudaErrorNotSupported where the driver offers no
// tensor-map encoder; cudaErrorNoKernelImageForDevice without the sm_90a code (code_arch.h: the
// portable build, or a GPU other than Hopper). `max_blocks` > 0 caps the persistent grid (tests:
// several items per block); 0 means one block per SM. Keys past a document's end are masked in the
// scores, so P is 0 there, but the product still reads V rows of the next document: V must be
// finite everywhere (it is, unless training has already diverged; an Inf or NaN in V poisons the
// neighbouring document's last rows).
cudaError_t gated_attention_forward_wgmma(__nv_bfloat16* y, __nv_bfloat16* o, float* lse,
                                          const GatedAttentionArgs& a, void* workspace,
                                          size_t workspace_bytes, cudaStream_t stream,
                                          int max_blocks = 0);

// The same forward in two parts, for a batch whose attention layers all run on one stream: its
// work list (what the workspace above holds, which depends on the documents, the token count
// and the head counts only) built once by _schedule, then each layer's forward by _scheduled on
// it. Each such forward leaves the list as it found it (its last block zeroes the counter the
// blocks take items with), so the forwards on one list must not overlap in time: one stream, or
// ordered by events. The list costs a kernel of one block, which each forward would otherwise
// wait for.
cudaError_t gated_attention_forward_wgmma_schedule(const GatedAttentionArgs& a, void* schedule,
                                                   size_t schedule_bytes, cudaStream_t stream);
cudaError_t gated_attention_forward_wgmma_scheduled(__nv_bfloat16* y, __nv_bfloat16* o, float* lse,
                                                    const GatedAttentionArgs& a, void* schedule,
                                                    size_t schedule_bytes, cudaStream_t stream,
                                                    int max_blocks = 0);

// The backward on wgmma + TMA (attention_wgmma_backward.cu): same contract as
// gated_attention_backward (attention.h) except that it takes the gated output y (the forward's
// y) where that takes o: dgate = dy * y * (1 - sigmoid(gate)) and the row terms
// sum_c d_o * (y / sigmoid) equal o's in real numbers (attention_gate_backward_from_y). Where the
// batch's dS tiles (8 KiB per 64 x 64 tile of (query, key) pairs and query head;
// attention_ds_tile_bytes, bounded by a.max_doc_tokens) fit in `ds_budget` bytes of workspace, they
// go through memory and dQ is summed by a pass of its own: every output deterministic. Otherwise dQ
// is summed over key tiles in fp32 by atomic additions and its bits may differ from run to run
// (within fp32 rounding of the sums). a.max_doc_tokens, when given, must bound every document. dq,
// dk, dv, dy and y 16-byte aligned. cudaErrorNoKernelImageForDevice without the sm_90a code.
size_t gated_attention_backward_wgmma_workspace_bytes(const GatedAttentionArgs& a,
                                                      size_t ds_budget = kAttentionDsBudget);
cudaError_t gated_attention_backward_wgmma(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                                           __nv_bfloat16* dgate, const __nv_bfloat16* dy,
                                           const __nv_bfloat16* y, const float* lse,
                                           const GatedAttentionArgs& a, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream,
                                           size_t ds_budget = kAttentionDsBudget);

}  // namespace deltatune
#endif
