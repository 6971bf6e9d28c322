// Gated varlen flash attention (CUDA) against attention_*_ref and output_gate_*_ref: GQA groups
// of 1, 2 and 3, one-token documents, documents longer than a tile and not a multiple of it,
// tiles straddling documents, the gate read in place from q_proj's interleaved layout; for the
// handwritten kernel (flash_attention.cu) and cuDNN's (cudnn_attention.cc, where built), whose
// batch slots past the documents are empty ([cuda]; skipped with a printed reason where no GPU is
// present).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/attention.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/cuda_test_util.h"
#if DELTATUNE_HAVE_CUDNN_ATTENTION
#include "kernels/cudnn_attention.h"
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

TEST_CASE("gated flash attention CUDA forward and backward match the reference",
          "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::vector<bool> impls = {false};  // use cuDNN?
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    auto made = CudnnAttention::create();
    REQUIRE(made.ok());
    CudnnAttention& cudnn = **made;
    impls.push_back(true);  // the default backward (attention_core_choice) where built
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
                const size_t qn = static_cast<size_t>(tokens * hq * d);
                const size_t kvn = static_cast<size_t>(tokens * hkv * d);
                const Bf16Data q = random_bf16(qn, rng);
                const Bf16Data k = random_bf16(kvn, rng);
                const Bf16Data v = random_bf16(kvn, rng);
                // q_proj-style buffer: per head [query | gate]; only the gate half is used here.
                const Bf16Data qg = random_bf16(2 * qn, rng, 2.0f);
                const std::vector<float> gate = gate_half(qg.f, tokens, hq);
                const float scale = 1.0f / 16.0f;
                std::vector<float> o_ref(qn), lse_ref(static_cast<size_t>(tokens * hq)), y_ref(qn);
                attention_forward_ref(o_ref.data(), lse_ref.data(), q.f.data(), k.f.data(),
                                      v.f.data(), cu.data(), num_docs, hq, hkv, d, scale);
                output_gate_forward_ref(y_ref.data(), o_ref.data(), gate.data(),
                                        static_cast<int64_t>(qn));

                DeviceBuffer<uint16_t> d_q(q.bits), d_k(k.bits), d_v(v.bits), d_qg(qg.bits);
                DeviceBuffer<int32_t> d_cu(cu);
                DeviceBuffer<uint16_t> d_y(qn), d_o(qn);
                DeviceBuffer<float> d_lse(lse_ref.size());
                d_y.poison();
                d_o.poison();
                d_lse.poison();
                // Known longest document for some cases, unknown (bounded by tokens) for others.
                const GatedAttentionArgs a = gated_attention_args(
                    d_q, d_k, d_v, d_qg, d_cu, num_docs, tokens, hq, hkv, scale,
                    hq == hkv ? 0 : *std::max_element(lengths.begin(), lengths.end()));
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
                const Bf16Data dy = random_bf16(qn, rng);
                std::vector<float> do_ref(qn), dgate_ref(qn);
                output_gate_backward_ref(do_ref.data(), dgate_ref.data(), dy.f.data(), o_ref.data(),
                                         gate.data(), static_cast<int64_t>(qn));
                std::vector<float> dq_ref(qn), dk_ref(kvn), dv_ref(kvn);
                attention_backward_ref(dq_ref.data(), dk_ref.data(), dv_ref.data(), do_ref.data(),
                                       q.f.data(), k.f.data(), v.f.data(), o_ref.data(),
                                       lse_ref.data(), cu.data(), num_docs, hq, hkv, d, scale);
                DeviceBuffer<uint16_t> d_dy(dy.bits), d_dq(qn), d_dk(kvn), d_dv(kvn), d_dqg(2 * qn);
                d_dq.poison();
                d_dk.poison();
                d_dv.poison();
                d_dqg.poison();
                backward(d_dq, d_dk, d_dv, d_dqg, d_dy);
                const auto dqg = d_dqg.download();
                std::vector<float> dgate(qn);
                int64_t query_half_written = 0;
                for (int64_t t = 0; t < tokens; ++t) {
                    for (int64_t h = 0; h < hq; ++h) {
                        for (int64_t c = 0; c < d; ++c) {
                            const size_t base = static_cast<size_t>(t * hq * 2 * d + h * 2 * d + c);
                            dgate[static_cast<size_t>((t * hq + h) * d + c)] =
                                bf16_bits_to_float(dqg[base + static_cast<size_t>(d)]);
                            query_half_written += dqg[base] != 0xffff;
                        }
                    }
                }
                CHECK(query_half_written == 0);
                CHECK(noted("attention dgate rel", rel_err(dgate, dgate_ref)) < 1e-2);
                const auto dq = to_float(d_dq.download());
                const auto dk = to_float(d_dk.download());
                const auto dv = to_float(d_dv.download());
                CHECK(noted("attention dq rel", rel_err(dq, dq_ref)) < 2e-2);
                CHECK(noted("attention dk rel", rel_err(dk, dk_ref)) < 2e-2);
                CHECK(noted("attention dv rel", rel_err(dv, dv_ref)) < 2e-2);
                CHECK(noted("attention dv max_scaled", max_scaled_err(dv, dv_ref, 2e-2, 5e-2)) <=
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
