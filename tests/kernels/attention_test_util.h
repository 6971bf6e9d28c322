// Gated attention arguments for the [cuda] attention tests and benchmarks: device q, k, v and a
// q_proj-style buffer holding per head [query | gate], its gate half read in place.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "tests/kernels/cuda_test_util.h"

namespace deltatune::cudatest {

// head_dim 256 rows of (tokens, heads, 256); `qg` is (tokens, q_heads, 2 * 256); max_doc_tokens
// 0 leaves the longest document unknown.
inline GatedAttentionArgs gated_attention_args(
    const DeviceBuffer<uint16_t>& q, const DeviceBuffer<uint16_t>& k,
    const DeviceBuffer<uint16_t>& v, const DeviceBuffer<uint16_t>& qg,
    const DeviceBuffer<int32_t>& cu_seqlens, int64_t num_docs, int64_t tokens, int64_t q_heads,
    int64_t kv_heads, float scale, int64_t max_doc_tokens) {
    constexpr int64_t d = 256;
    GatedAttentionArgs a;
    a.q = bf16_ptr(q);
    a.k = bf16_ptr(k);
    a.v = bf16_ptr(v);
    a.gate = bf16_ptr(qg) + d;
    a.gate_token_stride = q_heads * 2 * d;
    a.gate_head_stride = 2 * d;
    a.cu_seqlens = cu_seqlens.get();
    a.num_docs = num_docs;
    a.tokens = tokens;
    a.q_heads = q_heads;
    a.kv_heads = kv_heads;
    a.head_dim = d;
    a.scale = scale;
    a.max_doc_tokens = max_doc_tokens;
    return a;
}

// The gate half of a q_proj-style (tokens, q_heads, [query | gate]) buffer as (tokens, q_heads,
// 256) floats.
inline std::vector<float> gate_half(const std::vector<float>& qg, int64_t tokens, int64_t q_heads) {
    constexpr int64_t d = 256;
    std::vector<float> gate(static_cast<size_t>(tokens * q_heads * d));
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t h = 0; h < q_heads; ++h) {
            for (int64_t c = 0; c < d; ++c) {
                gate[static_cast<size_t>((t * q_heads + h) * d + c)] =
                    qg[static_cast<size_t>(t * q_heads * 2 * d + h * 2 * d + d + c)];
            }
        }
    }
    return gate;
}

}  // namespace deltatune::cudatest
#endif
