// Gated full attention core: causal softmax attention over packed documents (varlen, each token
// attends only to earlier tokens of its own document), GQA (query head h reads kv head h / G,
// G = q_heads / kv_heads), then the sigmoid output gate y = o * sigmoid(gate).
// Gradient contract: all gradients are written (=).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

// q: (tokens, q_heads, head_dim); k, v: (tokens, kv_heads, head_dim); out: (tokens, q_heads,
// head_dim); lse: (tokens, q_heads) log-sum-exp of the scaled scores, saved for backward.
// cu_seqlens: (num_docs + 1) document starts, cu_seqlens[0] = 0, last = tokens.
template <typename T>
void attention_forward_ref(T* out, T* lse, const T* q, const T* k, const T* v,
                           const int32_t* cu_seqlens, int64_t num_docs, int64_t q_heads,
                           int64_t kv_heads, int64_t head_dim, T scale);
template <typename T>
void attention_backward_ref(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                            const T* out, const T* lse, const int32_t* cu_seqlens, int64_t num_docs,
                            int64_t q_heads, int64_t kv_heads, int64_t head_dim, T scale);

// y = o * sigmoid(gate), elementwise over n values.
template <typename T>
void output_gate_forward_ref(T* y, const T* o, const T* gate, int64_t n);
template <typename T>
void output_gate_backward_ref(T* d_o, T* dgate, const T* dy, const T* o, const T* gate, int64_t n);

// The wgmma backward's dS tiles (attention_wgmma_dq.h): 8 KiB per 64 x 64 tile of
// (query, key) pairs and query head. An upper bound on their bytes for `tokens` in `num_docs`
// documents none longer than `max_doc_tokens` (n_d 64-token tiles per document: the
// sum_d n_d (n_d + 1) / 2 tile pairs are at most (sum_d n_d) (n_max + 1) / 2), and the budget up
// to which they go through memory (above it dQ is summed with atomics instead). The memory
// planner counts them too.
constexpr size_t kAttentionDsBudget = size_t{4} << 30;
inline size_t attention_ds_tile_bound(int64_t tokens, int64_t num_docs, int64_t max_doc_tokens,
                                      int64_t q_heads) {
    const int64_t tiles = (tokens + 63) / 64 + num_docs;
    const int64_t n_max = ((max_doc_tokens > 0 ? max_doc_tokens : tokens) + 63) / 64;
    // Past 2^62 bytes (no memory holds that) the bound saturates rather than wraps.
    if (static_cast<double>(tiles) * static_cast<double>(n_max + 1) * 0.5 *
            static_cast<double>(q_heads) * 8192.0 >
        0x1p62) {
        return size_t{1} << 62;
    }
    return static_cast<size_t>((tiles * (n_max + 1) + 1) / 2 * q_heads) * 8192;
}

// Host-side sizes of the wgmma kernels' device workspaces (the kernels and the memory planner
// share them; the plan is made in builds without CUDA too). A tile list
// (attention_wgmma_tile.cuh) of `rows`-token tiles: 16 bytes of counters, then 8 bytes per
// tile (at most tokens / rows rounded up, plus one partial tile per document) and per level (as
// many as a document of `tokens` has tiles).
inline int64_t attention_tile_list_capacity(int64_t tokens, int64_t num_docs, int rows) {
    return (tokens + rows - 1) / rows + num_docs;
}
inline int64_t attention_tile_list_levels(int64_t tokens, int rows) {
    return (tokens + rows - 1) / rows;
}
inline size_t attention_tile_list_bytes(int64_t tokens, int64_t num_docs, int rows) {
    return 16 + 8 * static_cast<size_t>(attention_tile_list_capacity(tokens, num_docs, rows) +
                                        attention_tile_list_levels(tokens, rows));
}

// The wgmma backward's workspace (attention_wgmma_backward.cu; head_dim 256, 64-row
// tiles), in order, each part 256-byte aligned: d_o, delta, the key-tile list, then either (dS
// through memory) the documents' pair bases, the dQ pass's query-tile list and the dS tiles (at
// most `ds_cap` bytes of them), or (dQ by atomics) dQ's fp32 sums.
struct AttentionBackwardLayout {
    size_t d_o = 0, delta = 0, key_list = 0, pair_base = 0, dq_list = 0, ds = 0, dq_acc = 0;
    size_t total = 0;
};
inline AttentionBackwardLayout attention_backward_layout(int64_t tokens, int64_t num_docs,
                                                         int64_t max_doc_tokens, int64_t q_heads,
                                                         bool ds_mode, size_t ds_cap = ~size_t{0}) {
    constexpr size_t kHeadDim = 256;
    constexpr int kTileRows = 64;
    const size_t rows = static_cast<size_t>(tokens * q_heads);
    AttentionBackwardLayout l;
    size_t at = 0;
    auto take = [&](size_t& field, size_t bytes) {
        field = at;
        at += (bytes + 255) / 256 * 256;
    };
    take(l.d_o, 2 * rows * kHeadDim);
    take(l.delta, 4 * rows);
    take(l.key_list, attention_tile_list_bytes(tokens, num_docs, kTileRows));
    if (ds_mode) {
        take(l.pair_base, 8 * static_cast<size_t>(num_docs));
        take(l.dq_list, attention_tile_list_bytes(tokens, num_docs, kTileRows));
        take(l.ds,
             std::min(attention_ds_tile_bound(tokens, num_docs, max_doc_tokens, q_heads), ds_cap));
    } else {
        take(l.dq_acc, 4 * rows * kHeadDim);
    }
    l.total = at;
    return l;
}

// The most that workspace can take for any batch of `tokens` tokens: its documents unknown, their
// number and lengths are taken at their most (`tokens` each), the dS tiles at `ds_budget` when
// their bound passes it. What the memory planner reserves for a full-attention layer's backward.
inline size_t attention_backward_workspace_bound(int64_t tokens, int64_t q_heads,
                                                 size_t ds_budget = kAttentionDsBudget) {
    return std::max(
        attention_backward_layout(tokens, tokens, tokens, q_heads, true, ds_budget).total,
        attention_backward_layout(tokens, tokens, tokens, q_heads, false).total);
}

// Shared memory per block the mma.sync flash kernels (attention_flash*.cu) need, the most of their
// forward, dK/dV and dQ kernels (attention_flash_common.cuh asserts it): 100 KiB, which an A100
// and every Hopper or Blackwell datacenter GPU give and a 99 KiB GPU (sm_86, sm_89, sm_120) does
// not.
inline constexpr int64_t kAttentionFlashSmemBytes = 102400;

#if DELTATUNE_HAVE_CUDA
// CUDA flash attention with the output gate fused (attention_flash.cu): bf16 in and out, fp32
// softmax and accumulation, tensor-core (mma.sync) tiles, no (tokens x tokens) matrix in memory.
// Device pointers; cu_seqlens lives on the device, `tokens` (= cu_seqlens[num_docs]) is passed
// from the host. The gate of head h of token t is read at
// gate + t * gate_token_stride + h * gate_head_stride (head_dim contiguous), so it can be read in
// place from q_proj's interleaved output; dgate is written with the same strides.
struct GatedAttentionArgs {
    const __nv_bfloat16* q = nullptr;  // (tokens, q_heads, head_dim), after q_norm + RoPE
    const __nv_bfloat16* k = nullptr;  // (tokens, kv_heads, head_dim), after k_norm + RoPE
    const __nv_bfloat16* v = nullptr;  // (tokens, kv_heads, head_dim)
    const __nv_bfloat16* gate = nullptr;
    int64_t gate_token_stride = 0, gate_head_stride = 0;
    const int32_t* cu_seqlens = nullptr;  // (num_docs + 1), device
    int64_t num_docs = 0, tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
    // head_dim^-1/2 for Qwen3.5; must be positive and finite (the wgmma forward takes each row's
    // maximum before scaling, and 0 or NaN would make masked scores NaN).
    float scale = 0.0f;
    // Longest document (host-known upper bound; 0 = unknown). attention_cudnn.cc sizes its plans
    // by it; the handwritten kernels need no bound.
    int64_t max_doc_tokens = 0;
};

// head_dim 256 (Qwen3.5's only full-attention head size), q_heads a multiple of kv_heads, scale
// positive and finite, inputs present and 16-byte aligned.
bool gated_attention_supported(const GatedAttentionArgs& a);

// o: (tokens, q_heads, head_dim) ungated attention output, saved for backward;
// y = o * sigmoid(gate): the layer's output, same shape; lse: (tokens, q_heads) fp32, saved.
cudaError_t gated_attention_forward(__nv_bfloat16* y, __nv_bfloat16* o, float* lse,
                                    const GatedAttentionArgs& a, cudaStream_t stream);

// All gradients written (=): dq like q, dk and dv like k and v, dgate at the gate strides.
// Deterministic (no atomics): dk/dv and dq come from separate kernels.
size_t gated_attention_backward_workspace_bytes(const GatedAttentionArgs& a);
cudaError_t gated_attention_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                                     __nv_bfloat16* dgate, const __nv_bfloat16* dy,
                                     const __nv_bfloat16* o, const float* lse,
                                     const GatedAttentionArgs& a, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream);
#endif

}  // namespace deltatune
