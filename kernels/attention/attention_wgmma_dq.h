// The dQ pass of the wgmma attention backward (attention_wgmma_backward.cu), for batches
// whose dS tiles fit in memory: the main kernel leaves each (query tile, key tile, head) tile of
// dS^T (64 x 64 bf16, in the 128-byte swizzled layout of its shared memory) in `ds`, and this
// pass forms dQ = scale * dS K per query tile with no atomics: deterministic. Internal to the
// backward; its reference is the backward's (attention_backward_ref).
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention/attention.h"

namespace deltatune {

// Where the tile of dS^T for query tile t and key tile k <= t (64-token tiles counted from the
// document's start) of document d and query head h starts, in elements of `ds`:
//   ((pair_base[d] + t (t + 1) / 2 + k) * q_heads + h) * 4096,
// pair_base[d] being the number of (t, k) pairs of the documents before d.
// Bytes of `ds` for the batch: an upper bound from the token count and the longest document.
size_t attention_ds_tile_bytes(const GatedAttentionArgs& a);
// Fills pair_base (num_docs entries, device) from cu_seqlens.
cudaError_t attention_ds_pair_base(int64_t* pair_base, const GatedAttentionArgs& a,
                                   cudaStream_t stream);

// dq = scale * dS K for every query row (bf16, 16-byte aligned). `workspace` holds
// attention_ds_dq_workspace_bytes(a) bytes (16-byte aligned): the pass's tile list.
size_t attention_ds_dq_workspace_bytes(const GatedAttentionArgs& a);
cudaError_t attention_ds_dq(__nv_bfloat16* dq, const __nv_bfloat16* ds, const int64_t* pair_base,
                            const GatedAttentionArgs& a, void* workspace, cudaStream_t stream);

}  // namespace deltatune
#endif
