// Token embedding: gather rows of the table (forward) and scatter-add into them (backward).
// CPU references (T = float or double); the CUDA kernels will join them here.
#pragma once
#include <cstddef>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

// out: (tokens, hidden) = table[ids[t], :]; table: (vocab, hidden). ids must be in [0, vocab).
template <typename T>
void embedding_forward_ref(T* out, const T* table, const int32_t* ids, int64_t tokens,
                           int64_t hidden);
// dtable (vocab, hidden) += dout rows scattered by ids (repeated ids accumulate).
template <typename T>
void embedding_backward_ref(T* dtable, const T* dout, const int32_t* ids, int64_t tokens,
                            int64_t hidden);

// The backward's order of the batch: the token positions stably sorted by id (sorted_ids[i] =
// ids[sorted_tokens[i]], positions ascending within an id). The GPU model computes it on the host
// while it stages the batch (an LSD radix sort, well under a millisecond), so the
// device never waits for a sort; embedding_backward sorts on the device when not given one.
void embedding_id_order(const int32_t* ids, int64_t tokens, int32_t* sorted_ids,
                        int32_t* sorted_tokens);

#if DELTATUNE_HAVE_CUDA
// CUDA (device pointers, stream-ordered, never synchronises). ids must lie in [0, vocab).
// out: (tokens, hidden) bf16 = table[ids[t], :].
cudaError_t embedding_forward(__nv_bfloat16* out, const __nv_bfloat16* table, const int32_t* ids,
                              int64_t tokens, int64_t hidden, cudaStream_t stream);
// Deterministic scatter-add: dtable (vocab, hidden) fp32 += dout rows grouped by id. The tokens
// are stably sorted by id (in one block; CUB past 16384 tokens), then each id's rows are summed in
// token order in pieces of at most 32 (the sorted order cut into aligned chunks of 32 positions),
// and the pieces are added to the table row in order: bitwise reproducible, and the reference's own
// order for every id whose sorted positions lie in one chunk.
size_t embedding_backward_workspace_bytes(int64_t tokens, int64_t hidden);
cudaError_t embedding_backward(float* dtable, const __nv_bfloat16* dout, const int32_t* ids,
                               int64_t tokens, int64_t hidden, int64_t vocab, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream);
// The same given the order (device copies of embedding_id_order's arrays); its workspace holds
// the pieces alone.
size_t embedding_backward_sorted_workspace_bytes(int64_t tokens, int64_t hidden);
cudaError_t embedding_backward_sorted(float* dtable, const __nv_bfloat16* dout,
                                      const int32_t* sorted_ids, const int32_t* sorted_tokens,
                                      int64_t tokens, int64_t hidden, void* workspace,
                                      size_t workspace_bytes, cudaStream_t stream);
#endif

}  // namespace deltatune
