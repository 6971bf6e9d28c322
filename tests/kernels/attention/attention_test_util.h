// What the [cuda] attention tests and benchmarks share: gated attention arguments (device q, k,
// v and a q_proj-style buffer holding per head [query | gate], its gate half read in place), and
// random problems with their fp32 references forward and backward.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/attention/attention.h"
#include "tests/kernels/common/cuda_test_util.h"

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

// A random gated attention problem over the documents of `cu` (head_dim 256, scale 1/16) and its
// fp32 forward reference: o, lse and y = o * sigmoid(gate).
struct AttentionCase {
    int64_t tokens = 0, num_docs = 0, q_heads = 0, kv_heads = 0;
    float scale = 1.0f / 16.0f;
    Bf16Data q, k, v, qg;  // qg: q_proj-style, per head [query | gate]
    std::vector<float> gate, o_ref, lse_ref, y_ref;
};

inline AttentionCase attention_case(std::mt19937& rng, const std::vector<int32_t>& cu,
                                    int64_t q_heads, int64_t kv_heads) {
    constexpr int64_t d = 256;
    AttentionCase p;
    p.tokens = cu.back();
    p.num_docs = static_cast<int64_t>(cu.size()) - 1;
    p.q_heads = q_heads;
    p.kv_heads = kv_heads;
    const size_t qn = static_cast<size_t>(p.tokens * q_heads * d);
    const size_t kvn = static_cast<size_t>(p.tokens * kv_heads * d);
    p.q = random_bf16(qn, rng);
    p.k = random_bf16(kvn, rng);
    p.v = random_bf16(kvn, rng);
    p.qg = random_bf16(2 * qn, rng, 2.0f);
    p.gate = gate_half(p.qg.f, p.tokens, q_heads);
    p.o_ref.resize(qn);
    p.lse_ref.resize(static_cast<size_t>(p.tokens * q_heads));
    p.y_ref.resize(qn);
    attention_forward_ref(p.o_ref.data(), p.lse_ref.data(), p.q.f.data(), p.k.f.data(),
                          p.v.f.data(), cu.data(), p.num_docs, q_heads, kv_heads, d, p.scale);
    output_gate_forward_ref(p.y_ref.data(), p.o_ref.data(), p.gate.data(),
                            static_cast<int64_t>(qn));
    return p;
}

// A case's inputs on the device, its forward outputs (poisoned, to catch unwritten elements) and
// the arguments over them; max_doc_tokens 0 leaves the longest document unknown.
struct AttentionDeviceCase {
    DeviceBuffer<uint16_t> q, k, v, qg;
    DeviceBuffer<int32_t> cu;
    DeviceBuffer<uint16_t> y, o;
    DeviceBuffer<float> lse;
    GatedAttentionArgs args;
    AttentionDeviceCase(const AttentionCase& p, const std::vector<int32_t>& cu_seqlens,
                        int64_t max_doc_tokens)
        : q(p.q.bits),
          k(p.k.bits),
          v(p.v.bits),
          qg(p.qg.bits),
          cu(cu_seqlens),
          y(p.o_ref.size()),
          o(p.o_ref.size()),
          lse(p.lse_ref.size()),
          args(gated_attention_args(q, k, v, qg, cu, p.num_docs, p.tokens, p.q_heads, p.kv_heads,
                                    p.scale, max_doc_tokens)) {
        y.poison();
        o.poison();
        lse.poison();
    }
};

// A random upstream gradient dy of y and the fp32 chain back from it: the gate first, then
// attention with d_o.
struct AttentionGrads {
    Bf16Data dy;
    std::vector<float> dgate_ref, dq_ref, dk_ref, dv_ref;
};

inline AttentionGrads attention_grads(std::mt19937& rng, const AttentionCase& p,
                                      const std::vector<int32_t>& cu) {
    constexpr int64_t d = 256;
    const size_t qn = p.o_ref.size();
    const size_t kvn = p.k.f.size();
    AttentionGrads g;
    g.dy = random_bf16(qn, rng);
    std::vector<float> do_ref(qn);
    g.dgate_ref.resize(qn);
    output_gate_backward_ref(do_ref.data(), g.dgate_ref.data(), g.dy.f.data(), p.o_ref.data(),
                             p.gate.data(), static_cast<int64_t>(qn));
    g.dq_ref.resize(qn);
    g.dk_ref.resize(kvn);
    g.dv_ref.resize(kvn);
    attention_backward_ref(g.dq_ref.data(), g.dk_ref.data(), g.dv_ref.data(), do_ref.data(),
                           p.q.f.data(), p.k.f.data(), p.v.f.data(), p.o_ref.data(),
                           p.lse_ref.data(), cu.data(), p.num_docs, p.q_heads, p.kv_heads, d,
                           p.scale);
    return g;
}

}  // namespace deltatune::cudatest
#endif
