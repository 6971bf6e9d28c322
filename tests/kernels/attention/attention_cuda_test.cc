// Gated varlen flash attention (CUDA) against attention_*_ref and output_gate_*_ref: GQA groups
// of 1, 2 and 3, one-token documents, documents longer than a tile and not a multiple of it,
// tiles straddling documents, the gate read in place from q_proj's interleaved layout; for the
// handwritten kernel (attention_flash.cu) and cuDNN's (attention_cudnn.cc, where built), whose
// batch slots past the documents are empty ([cuda]; skipped with a printed reason where no GPU is
// present).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/attention/attention.h"
#include "tests/kernels/attention/attention_test_util.h"
#include "tests/kernels/common/cuda_test_util.h"
#if DELTATUNE_HAVE_CUDNN_ATTENTION
#include "kernels/attention/attention_cudnn.h"
#endif

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

// Where o is wrong (unwritten or off by more than 5e-2): counts per head and per document, to
// locate a layout fault from one device run.
std::string where_wrong(const std::vector<float>& o, const std::vector<float>& o_ref,
                        const std::vector<int32_t>& cu, int64_t hq, int64_t d) {
    std::vector<int64_t> head_bad(static_cast<size_t>(hq)), doc_bad(cu.size() - 1);
    for (int64_t t = 0; t < cu.back(); ++t) {
        const auto doc =
            static_cast<size_t>(std::upper_bound(cu.begin(), cu.end(), t) - cu.begin() - 1);
        for (int64_t h = 0; h < hq; ++h) {
            for (int64_t c = 0; c < d; ++c) {
                const auto i = static_cast<size_t>((t * hq + h) * d + c);
                if (std::isfinite(o[i]) && std::abs(o[i] - o_ref[i]) < 5e-2f) continue;
                ++head_bad[static_cast<size_t>(h)];
                ++doc_bad[doc];
            }
        }
    }
    std::string out = "o entries wrong per head [";
    for (int64_t b : head_bad) out += " " + std::to_string(b);
    out += " ], per document [";
    for (int64_t b : doc_bad) out += " " + std::to_string(b);
    return out + " ]";
}

// Host-side argument checks: no GPU needed (the pointers are never dereferenced).
TEST_CASE("gated attention rejects a scale that is not positive and finite", "[kernels]") {
    alignas(16) static const uint16_t data[16] = {};
    static const int32_t cu[2] = {0, 1};
    GatedAttentionArgs a;
    a.q = a.k = a.v = a.gate = reinterpret_cast<const __nv_bfloat16*>(data);
    a.gate_token_stride = 512;
    a.gate_head_stride = 256;
    a.cu_seqlens = cu;
    a.num_docs = 1;
    a.tokens = 1;
    a.q_heads = a.kv_heads = 1;
    a.head_dim = 256;
    a.scale = 1.0f / 16;
    CHECK(gated_attention_supported(a));
    for (const float bad : {0.0f, -1.0f / 16, INFINITY, NAN}) {
        a.scale = bad;
        INFO("scale " << bad);
        CHECK_FALSE(gated_attention_supported(a));
    }
}

TEST_CASE("gated flash attention CUDA forward and backward match the reference",
          "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::vector<bool> impls = {false};  // use cuDNN?
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    auto made = CudnnAttention::create();
    REQUIRE(made.ok());
    CudnnAttention& cudnn = **made;
    impls.push_back(true);  // the default backward (DeviceContext::attention_core) where built
#endif
    for (const bool use_cudnn : impls) {
        std::mt19937 rng(81);
        const int64_t d = 256;
        const std::vector<std::vector<int32_t>> docs = {
            {1}, {1, 1, 1}, {70}, {3, 130, 1, 64, 200}, {33, 1, 97}};
        const std::pair<int64_t, int64_t> heads[] = {{1, 1}, {4, 2}, {3, 1}};
        for (const auto& lengths : docs) {
            for (const auto& [hq, hkv] : heads) {
                const auto cu = awkward_cu_seqlens(lengths);
                const int64_t tokens = cu.back();
                const int64_t num_docs = static_cast<int64_t>(lengths.size());
                INFO((use_cudnn ? "cudnn" : "flash")
                     << ": tokens = " << tokens << ", docs = " << num_docs << ", q_heads = " << hq
                     << ", kv_heads = " << hkv);
                const AttentionCase p = attention_case(rng, cu, hq, hkv);
                const size_t qn = p.o_ref.size(), kvn = p.k.f.size();
                const std::vector<float>&o_ref = p.o_ref, &lse_ref = p.lse_ref, &y_ref = p.y_ref;

                // Known longest document for some cases, unknown (bounded by tokens) for others.
                AttentionDeviceCase dc(
                    p, cu, hq == hkv ? 0 : *std::max_element(lengths.begin(), lengths.end()));
                auto& [d_q, d_k, d_v, d_qg, d_cu, d_y, d_o, d_lse, a] = dc;
                REQUIRE(gated_attention_supported(a));
                // Runs the backward of the implementation under test.
                auto backward = [&](DeviceBuffer<uint16_t>& dq, DeviceBuffer<uint16_t>& dk,
                                    DeviceBuffer<uint16_t>& dv, DeviceBuffer<uint16_t>& dqg,
                                    const DeviceBuffer<uint16_t>& dy) {
#if DELTATUNE_HAVE_CUDNN_ATTENTION
                    if (use_cudnn) {
                        auto bytes = cudnn.backward_workspace_bytes(a);
                        REQUIRE(bytes.ok());
                        DeviceBuffer<char> ws(*bytes);
                        ws.poison();
                        const absl::Status st = cudnn.backward(
                            bf16_ptr(dq), bf16_ptr(dk), bf16_ptr(dv), bf16_ptr(dqg) + d,
                            bf16_ptr(dy), bf16_ptr(d_o), d_lse.get(), a, ws.get(), *bytes, nullptr);
                        INFO(st.ToString());
                        REQUIRE(st.ok());
                        return;
                    }
#endif
                    const size_t ws_bytes = gated_attention_backward_workspace_bytes(a);
                    DeviceBuffer<char> ws(ws_bytes);
                    ws.poison();
                    REQUIRE(gated_attention_backward(bf16_ptr(dq), bf16_ptr(dk), bf16_ptr(dv),
                                                     bf16_ptr(dqg) + d, bf16_ptr(dy), bf16_ptr(d_o),
                                                     d_lse.get(), a, ws.get(), ws_bytes,
                                                     nullptr) == cudaSuccess);
                };
#if DELTATUNE_HAVE_CUDNN_ATTENTION
                if (use_cudnn) {
                    auto bytes = cudnn.forward_workspace_bytes(a);
                    INFO(bytes.status().ToString());
                    REQUIRE(bytes.ok());
                    DeviceBuffer<char> ws(*bytes);
                    ws.poison();
                    const absl::Status st = cudnn.forward(bf16_ptr(d_y), bf16_ptr(d_o), d_lse.get(),
                                                          a, ws.get(), *bytes, nullptr);
                    INFO(st.ToString());
                    REQUIRE(st.ok());
                }
#endif
                if (!use_cudnn) {
                    REQUIRE(gated_attention_forward(bf16_ptr(d_y), bf16_ptr(d_o), d_lse.get(), a,
                                                    nullptr) == cudaSuccess);
                }
                const auto o = to_float(d_o.download());
                INFO(where_wrong(o, o_ref, cu, hq, d));  // shown if a check fails
                const auto y = to_float(d_y.download());
                CHECK(noted("attention o rel", rel_err(o, o_ref)) < 1e-2);
                CHECK(noted("attention o max_scaled", max_scaled_err(o, o_ref, 1e-2, 2e-2)) <= 1.0);
                CHECK(noted("attention y rel", rel_err(y, y_ref)) < 1e-2);
                CHECK(noted("attention lse max_scaled",
                            max_scaled_err(d_lse.download(), lse_ref, 1e-3, 1e-3)) <= 1.0);

                // Backward: gate first, then attention with d_o, all against the fp32 chain.
                const AttentionGrads gr = attention_grads(rng, p, cu);
                DeviceBuffer<uint16_t> d_dy(gr.dy.bits), d_dq(qn), d_dk(kvn), d_dv(kvn),
                    d_dqg(2 * qn);
                d_dq.poison();
                d_dk.poison();
                d_dv.poison();
                d_dqg.poison();
                backward(d_dq, d_dk, d_dv, d_dqg, d_dy);
                const auto dqg = d_dqg.download();
                int64_t query_half_written = 0;  // the query halves keep their poison
                for (size_t i = 0; i < dqg.size(); ++i) {
                    query_half_written += (i / static_cast<size_t>(d)) % 2 == 0 && dqg[i] != 0xffff;
                }
                CHECK(query_half_written == 0);
                const std::vector<float> dgate = gate_half(to_float(dqg), tokens, hq);
                CHECK(noted("attention dgate rel", rel_err(dgate, gr.dgate_ref)) < 1e-2);
                const auto dq = to_float(d_dq.download());
                const auto dk = to_float(d_dk.download());
                const auto dv = to_float(d_dv.download());
                CHECK(noted("attention dq rel", rel_err(dq, gr.dq_ref)) < 2e-2);
                CHECK(noted("attention dk rel", rel_err(dk, gr.dk_ref)) < 2e-2);
                CHECK(noted("attention dv rel", rel_err(dv, gr.dv_ref)) < 2e-2);
                CHECK(noted("attention dv max_scaled", max_scaled_err(dv, gr.dv_ref, 2e-2, 5e-2)) <=
                      1.0);
                // The handwritten kernel is deterministic: a second backward gives the same bits.
                if (use_cudnn) continue;
                d_dq.poison();
                d_dk.poison();
                d_dv.poison();
                backward(d_dq, d_dk, d_dv, d_dqg, d_dy);
                CHECK(to_float(d_dq.download()) == dq);
                CHECK(to_float(d_dk.download()) == dk);
                CHECK(to_float(d_dv.download()) == dv);
            }
        }
    }
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    std::printf("cuDNN attention: %d plans built in %.1f s\n", cudnn.plans_built(),
                cudnn.build_seconds());
#endif
}
#else
TEST_CASE("gated flash attention CUDA forward and backward match the reference",
          "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
