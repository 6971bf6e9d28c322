// The wgmma + TMA gated attention forward (flash_attention_wgmma.cu) against attention_ref.cc
// and output_gate_forward_ref: one-token documents, empty documents, documents shorter than,
// equal to and longer than a 128-row query tile and not multiples of the 64-key tile, GQA groups
// of 1, 2, 3 and 6, the gate read in place from q_proj's interleaved layout, poisoned outputs
// ([cuda]; skipped with a printed reason where no GPU is present). Its o and lse then go through
// every backward of the build (cuDNN's, the default where built, and the handwritten one); a
// grid of 1 and 3 blocks, each taking several items, must give the same bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>

#include "kernels/attention.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/cuda_test_util.h"
#if DELTATUNE_HAVE_CUDA
#include "kernels/flash_attention_wgmma.h"
#endif
#if DELTATUNE_HAVE_CUDNN_ATTENTION
#include "kernels/cudnn_attention.h"
#endif

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

#if DELTATUNE_HAVE_CUDNN_ATTENTION
constexpr bool kHaveCudnn = true;
#else
constexpr bool kHaveCudnn = false;
#endif

TEST_CASE("wgmma gated attention forward matches the reference", "[kernels][cuda]") {
    if (!have_gpu()) return;
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    auto made = CudnnAttention::create();
    REQUIRE(made.ok());
    CudnnAttention& cudnn = **made;
#endif
    std::mt19937 rng(123);
    const int64_t d = 256;
    const std::vector<std::vector<int32_t>> docs = {{1},
                                                    {1, 1, 1},
                                                    {70},
                                                    {128},
                                                    {3, 130, 1, 64, 200},
                                                    {0, 33, 0, 1, 97},
                                                    {300, 517},
                                                    {1000, 5},
                                                    {129, 255, 257},
                                                    {5, 0}};
    const std::pair<int64_t, int64_t> heads[] = {{1, 1}, {4, 2}, {3, 1}, {6, 1}};
    for (const auto& lengths : docs) {
        for (const auto& [hq, hkv] : heads) {
            const auto cu = awkward_cu_seqlens(lengths);
            const int64_t tokens = cu.back();
            const int64_t num_docs = static_cast<int64_t>(lengths.size());
            INFO("tokens = " << tokens << ", docs = " << num_docs << ", q_heads = " << hq
                             << ", kv_heads = " << hkv);
            const size_t qn = static_cast<size_t>(tokens * hq * d);
            const size_t kvn = static_cast<size_t>(tokens * hkv * d);
            const Bf16Data q = random_bf16(qn, rng);
            const Bf16Data k = random_bf16(kvn, rng);
            const Bf16Data v = random_bf16(kvn, rng);
            const Bf16Data qg = random_bf16(2 * qn, rng, 2.0f);  // per head [query | gate]
            const std::vector<float> gate = gate_half(qg.f, tokens, hq);
            const float scale = 1.0f / 16.0f;
            std::vector<float> o_ref(qn), lse_ref(static_cast<size_t>(tokens * hq)), y_ref(qn);
            attention_forward_ref(o_ref.data(), lse_ref.data(), q.f.data(), k.f.data(), v.f.data(),
                                  cu.data(), num_docs, hq, hkv, d, scale);
            output_gate_forward_ref(y_ref.data(), o_ref.data(), gate.data(),
                                    static_cast<int64_t>(qn));

            DeviceBuffer<uint16_t> d_q(q.bits), d_k(k.bits), d_v(v.bits), d_qg(qg.bits);
            DeviceBuffer<int32_t> d_cu(cu);
            DeviceBuffer<uint16_t> d_y(qn), d_o(qn);
            DeviceBuffer<float> d_lse(lse_ref.size());
            d_y.poison();
            d_o.poison();
            d_lse.poison();
            const GatedAttentionArgs a =
                gated_attention_args(d_q, d_k, d_v, d_qg, d_cu, num_docs, tokens, hq, hkv, scale,
                                     *std::max_element(lengths.begin(), lengths.end()));
            const size_t wsb = gated_attention_forward_wgmma_workspace_bytes(a);
            DeviceBuffer<char> ws(wsb);
            ws.poison();
            REQUIRE(gated_attention_forward_wgmma(bf16_ptr(d_y), bf16_ptr(d_o), d_lse.get(), a,
                                                  ws.get(), wsb, nullptr) == cudaSuccess);
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            const auto o = to_float(d_o.download());
            const auto y = to_float(d_y.download());
            CHECK(noted("wgmma attention o rel", rel_err(o, o_ref)) < 1e-2);
            CHECK(noted("wgmma attention o max_scaled", max_scaled_err(o, o_ref, 1e-2, 2e-2)) <=
                  1.0);
            CHECK(noted("wgmma attention y rel", rel_err(y, y_ref)) < 1e-2);
            CHECK(noted("wgmma attention y max_scaled", max_scaled_err(y, y_ref, 1e-2, 2e-2)) <=
                  1.0);
            CHECK(noted("wgmma attention lse max_scaled",
                        max_scaled_err(d_lse.download(), lse_ref, 1e-3, 1e-3)) <= 1.0);
            // Few blocks, so that each takes several items off the list (Q reloaded after the
            // previous item's, the rings' phases and the turns carried across items): the same
            // bits, since an item's arithmetic does not depend on which block runs it.
            for (const int blocks : {1, 3}) {
                DeviceBuffer<uint16_t> y2(qn), o2(qn);
                DeviceBuffer<float> lse2(lse_ref.size());
                y2.poison();
                o2.poison();
                lse2.poison();
                REQUIRE(gated_attention_forward_wgmma(bf16_ptr(y2), bf16_ptr(o2), lse2.get(), a,
                                                      ws.get(), wsb, nullptr,
                                                      blocks) == cudaSuccess);
                INFO("blocks = " << blocks);
                CHECK(o2.download() == d_o.download());
                CHECK(y2.download() == d_y.download());
                CHECK(lse2.download() == d_lse.download());
            }
            // A short workspace is refused, not overrun.
            CHECK(gated_attention_forward_wgmma(bf16_ptr(d_y), bf16_ptr(d_o), d_lse.get(), a,
                                                ws.get(), wsb - 1,
                                                nullptr) == cudaErrorInvalidValue);

            // The model's pairing: this forward's o and lse into the default backward (cuDNN's
            // where built, else the handwritten kernel), against the fp32 chain.
            const Bf16Data dy = random_bf16(qn, rng);
            std::vector<float> do_ref(qn), dgate_ref(qn), dq_ref(qn), dk_ref(kvn), dv_ref(kvn);
            output_gate_backward_ref(do_ref.data(), dgate_ref.data(), dy.f.data(), o_ref.data(),
                                     gate.data(), static_cast<int64_t>(qn));
            attention_backward_ref(dq_ref.data(), dk_ref.data(), dv_ref.data(), do_ref.data(),
                                   q.f.data(), k.f.data(), v.f.data(), o_ref.data(), lse_ref.data(),
                                   cu.data(), num_docs, hq, hkv, d, scale);
            DeviceBuffer<uint16_t> d_dy(dy.bits), d_dq(qn), d_dk(kvn), d_dv(kvn), d_dqg(2 * qn);
            // Every backward this build has: cuDNN's (the default where built) and the
            // handwritten kernel (the default elsewhere).
            for (const bool use_cudnn : {false, true}) {
                if (use_cudnn && !kHaveCudnn) continue;
                INFO((use_cudnn ? "cuDNN backward" : "handwritten backward"));
                d_dq.poison();
                d_dk.poison();
                d_dv.poison();
                d_dqg.poison();
                if (use_cudnn) {
#if DELTATUNE_HAVE_CUDNN_ATTENTION
                    auto bytes = cudnn.backward_workspace_bytes(a);
                    REQUIRE(bytes.ok());
                    DeviceBuffer<char> bws(*bytes);
                    const absl::Status st = cudnn.backward(
                        bf16_ptr(d_dq), bf16_ptr(d_dk), bf16_ptr(d_dv), bf16_ptr(d_dqg) + d,
                        bf16_ptr(d_dy), bf16_ptr(d_o), d_lse.get(), a, bws.get(), *bytes, nullptr);
                    INFO(st.ToString());
                    REQUIRE(st.ok());
#endif
                } else {
                    const size_t bwsb = gated_attention_backward_workspace_bytes(a);
                    DeviceBuffer<char> bws(bwsb);
                    REQUIRE(gated_attention_backward(bf16_ptr(d_dq), bf16_ptr(d_dk), bf16_ptr(d_dv),
                                                     bf16_ptr(d_dqg) + d, bf16_ptr(d_dy),
                                                     bf16_ptr(d_o), d_lse.get(), a, bws.get(), bwsb,
                                                     nullptr) == cudaSuccess);
                }
                const std::vector<float> dqg = to_float(d_dqg.download());
                std::vector<float> dgate(qn);
                for (size_t i = 0; i < qn; ++i) {
                    const size_t t = i / static_cast<size_t>(hq * d);
                    const size_t rest = i % static_cast<size_t>(hq * d);
                    dgate[i] = dqg[t * static_cast<size_t>(2 * hq * d) +
                                   rest / static_cast<size_t>(d) * static_cast<size_t>(2 * d) +
                                   static_cast<size_t>(d) + rest % static_cast<size_t>(d)];
                }
                CHECK(noted("wgmma->bwd dgate rel", rel_err(dgate, dgate_ref)) < 1e-2);
                CHECK(noted("wgmma->bwd dq rel", rel_err(to_float(d_dq.download()), dq_ref)) <
                      2e-2);
                CHECK(noted("wgmma->bwd dk rel", rel_err(to_float(d_dk.download()), dk_ref)) <
                      2e-2);
                CHECK(noted("wgmma->bwd dv rel", rel_err(to_float(d_dv.download()), dv_ref)) <
                      2e-2);
            }
        }
    }
}
#else
TEST_CASE("wgmma gated attention forward matches the reference", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
