// Gated attention benchmark on Qwen3.5-27B shapes (24 query / 4 kv heads of 256): the
// handwritten mma.sync kernel, the wgmma + TMA forward and backward, and cuDNN's SDPA with the
// gate's passes around it, on the 8192-token packed batch of kernels_bench.cc and on the
// benchmark's two SDPA rows (6 documents of 1,250 tokens; one 8192-token document). FLOPs count
// causal (query, key) pairs only: 4 * head_dim per pair and head forward, 2.5x that backward.
// `kernels_bench
// "[attention_bench]"` runs this alone, `kernels_bench "[attention_wgmma_bench]"` only the wgmma
// kernels' rows.
#include <catch2/catch.hpp>

#include <numeric>
#include <string>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_gate.h"
#if DELTATUNE_HAVE_CUDNN_ATTENTION
#include "kernels/attention/attention_cudnn.h"
#endif
#include "kernels/attention/attention_wgmma.h"
#include "tests/bench/qwen27b_shapes.h"
#include "tests/kernels/attention/attention_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;
using namespace bench;

// ours_only: the wgmma kernels' rows alone, against the nominal ceilings (seconds instead of a
// minute of device time, for trying a change to them; hidden: only runs when named).
void attention_bench(bool ours_only) {
    if (!have_gpu()) return;
    std::mt19937 rng(7);  // the same packed batch as kernels_bench.cc's
    Ceilings ceil;
    cublasHandle_t blas = nullptr;
    REQUIRE(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
    if (!ours_only) measure_ceilings(blas, ceil);
    cublasDestroy(blas);
    const auto lengths = ultrachat_like_lengths(rng);
    std::printf("batch: %lld tokens in %zu documents\n", static_cast<long long>(kTokens),
                lengths.size());
    const std::vector<std::pair<std::string, std::vector<int32_t>>> attention_cases = {
        {" (packed)", lengths},
        {" (6 x 1250)", std::vector<int32_t>(6, 1250)},
        {" (1 x 8192)", {kTokens}}};
    for (const auto& [shape, docs] : attention_cases) {
        DeviceBuffer<int32_t> cu(awkward_cu_seqlens(docs));
        double pairs = 0;  // causal (query, key) pairs
        for (int32_t l : docs) pairs += 0.5 * l * (l + 1.0);
        const double fwd_flops = 4.0 * kHeadDim * kQHeads * pairs;
        const int64_t tokens = std::accumulate(docs.begin(), docs.end(), int64_t{0});
        const size_t qn = static_cast<size_t>(tokens * kQHeads * kHeadDim);
        const size_t kvn = static_cast<size_t>(tokens * kKvHeads * kHeadDim);
        DeviceBuffer<uint16_t> q(Bf16Fill{static_cast<size_t>(qn), 1.0f}),
            k(Bf16Fill{static_cast<size_t>(kvn), 1.0f}),
            v(Bf16Fill{static_cast<size_t>(kvn), 1.0f}),
            qg(Bf16Fill{static_cast<size_t>(2 * qn), 1.0f}), y(qn), o(qn),
            dy(Bf16Fill{static_cast<size_t>(qn), 1.0f}), dq(qn), dk(kvn), dv(kvn), dqg(2 * qn);
        DeviceBuffer<float> lse(static_cast<size_t>(tokens * kQHeads));
        const GatedAttentionArgs a = gated_attention_args(
            q, k, v, qg, cu, static_cast<int64_t>(docs.size()), tokens, kQHeads, kKvHeads,
            1.0f / 16, *std::max_element(docs.begin(), docs.end()));
        const size_t wsb = gated_attention_backward_workspace_bytes(a);
        DeviceBuffer<char> ws(wsb);
        if (!ours_only) {
            row(("flash attention forward" + shape).c_str(),
                median_ms(
                    [&] {
                        return gated_attention_forward(bf16_ptr(y), bf16_ptr(o), lse.get(), a,
                                                       nullptr);
                    },
                    10),
                0, fwd_flops, ceil);
        }
        {
            const size_t wwsb = gated_attention_forward_wgmma_workspace_bytes(a);
            DeviceBuffer<char> wws(wwsb);
            // As the model runs it: y and lse only (the wgmma backward takes y), on the batch's
            // work list, built once for all its layers. Then writing the ungated o as well, as
            // the other cores' backwards need; then building the list with every call, and the
            // list alone.
            REQUIRE(gated_attention_forward_wgmma_schedule(a, wws.get(), wwsb, nullptr) ==
                    cudaSuccess);
            for (const bool with_o : {false, true}) {
                row(((with_o ? "  writing o too" : "wgmma attention forward") + shape).c_str(),
                    median_ms(
                        [&] {
                            return gated_attention_forward_wgmma_scheduled(
                                bf16_ptr(y), with_o ? bf16_ptr(o) : nullptr, lse.get(), a,
                                wws.get(), wwsb, nullptr);
                        },
                        10),
                    0, fwd_flops, ceil);
            }
            row(("  listing its work each call" + shape).c_str(),
                median_ms(
                    [&] {
                        return gated_attention_forward_wgmma(bf16_ptr(y), nullptr, lse.get(), a,
                                                             wws.get(), wwsb, nullptr);
                    },
                    10),
                0, fwd_flops, ceil);
            std::printf("  its work list alone%s: %.1f us\n", shape.c_str(),
                        1e3 * median_ms(
                                  [&] {
                                      return gated_attention_forward_wgmma_schedule(a, wws.get(),
                                                                                    wwsb, nullptr);
                                  },
                                  10));
            // The default (dS tiles through memory, deterministic) and, with no budget for
            // them, dQ summed by atomics.
            for (const size_t budget : {kAttentionDsBudget, size_t{0}}) {
                const size_t bwsb = gated_attention_backward_wgmma_workspace_bytes(a, budget);
                DeviceBuffer<char> bws(bwsb);
                row(((budget > 0 ? "wgmma attention backward" : "  its dQ by atomics") + shape)
                        .c_str(),
                    median_ms(
                        [&] {
                            return gated_attention_backward_wgmma(
                                bf16_ptr(dq), bf16_ptr(dk), bf16_ptr(dv), bf16_ptr(dqg) + kHeadDim,
                                bf16_ptr(dy), bf16_ptr(y), lse.get(), a, bws.get(), bwsb, nullptr,
                                budget);
                        },
                        10),
                    0, 2.5 * fwd_flops, ceil);
            }
        }
        if (ours_only) continue;
        row(("flash attention backward" + shape).c_str(),
            median_ms(
                [&] {
                    return gated_attention_backward(
                        bf16_ptr(dq), bf16_ptr(dk), bf16_ptr(dv), bf16_ptr(dqg) + kHeadDim,
                        bf16_ptr(dy), bf16_ptr(o), lse.get(), a, ws.get(), wsb, nullptr);
                },
                10),
            0, 2.5 * fwd_flops, ceil);
#if DELTATUNE_HAVE_CUDNN_ATTENTION
        auto made = CudnnAttention::create();
        REQUIRE(made.ok());
        CudnnAttention& cudnn = **made;
        auto fwd_bytes = cudnn.forward_workspace_bytes(a);
        auto bwd_bytes = cudnn.backward_workspace_bytes(a);
        INFO(fwd_bytes.status().ToString() << " / " << bwd_bytes.status().ToString());
        REQUIRE((fwd_bytes.ok() && bwd_bytes.ok()));
        DeviceBuffer<char> cws(std::max(*fwd_bytes, *bwd_bytes));
        std::printf("cuDNN plans: %d built in %.1f s\n", cudnn.plans_built(),
                    cudnn.build_seconds());
        auto as_cuda = [](const absl::Status& st) {
            if (!st.ok()) std::printf("%s\n", st.ToString().c_str());
            return st.ok() ? cudaSuccess : cudaErrorUnknown;
        };
        const double cudnn_fwd_ms = median_ms(
            [&] {
                return as_cuda(cudnn.forward(bf16_ptr(y), bf16_ptr(o), lse.get(), a, cws.get(),
                                             cws.size(), nullptr));
            },
            10);
        const double cudnn_bwd_ms = median_ms(
            [&] {
                return as_cuda(cudnn.backward(bf16_ptr(dq), bf16_ptr(dk), bf16_ptr(dv),
                                              bf16_ptr(dqg) + kHeadDim, bf16_ptr(dy), bf16_ptr(o),
                                              lse.get(), a, cws.get(), cws.size(), nullptr));
            },
            10);
        row(("cudnn attention forward" + shape).c_str(), cudnn_fwd_ms, 0, fwd_flops, ceil);
        row(("cudnn attention backward" + shape).c_str(), cudnn_bwd_ms, 0, 2.5 * fwd_flops, ceil);
        // The sigmoid gate's passes around cuDNN's SDPA (which cannot fuse them), as bytes
        // (forward: o, gate in, y out; backward: dy, o, gate in, d_o, dgate out), and the SDPA
        // alone as the difference: what torch's SDPA figures compare with.
        const AttentionGateLayout gl{a.gate, a.gate_token_stride, a.gate_head_stride};
        const double gate_fwd_ms = median_ms(
            [&] {
                return attention_gate_forward(bf16_ptr(y), bf16_ptr(o), gl, tokens, kQHeads,
                                              nullptr);
            },
            20);
        const double gate_bwd_ms = median_ms(
            [&] {
                return attention_gate_backward(bf16_ptr(y), nullptr, bf16_ptr(dqg) + kHeadDim,
                                               bf16_ptr(dy), bf16_ptr(o), gl, tokens, kQHeads,
                                               nullptr);
            },
            20);
        row(("  its gate forward" + shape).c_str(), gate_fwd_ms, 3.0 * 2 * qn, 0, ceil);
        row(("  its gate backward" + shape).c_str(), gate_bwd_ms, 5.0 * 2 * qn, 0, ceil);
        row(("  its SDPA forward" + shape).c_str(), cudnn_fwd_ms - gate_fwd_ms, 0, fwd_flops, ceil);
        row(("  its SDPA backward" + shape).c_str(), cudnn_bwd_ms - gate_bwd_ms, 0, 2.5 * fwd_flops,
            ceil);
#endif
    }
}

TEST_CASE("attention benchmark on Qwen3.5-27B shapes", "[bench][attention_bench]") {
    attention_bench(false);
}
TEST_CASE("wgmma attention benchmark alone", "[.][bench][attention_wgmma_bench]") {
    attention_bench(true);
}
#endif

}  // namespace
}  // namespace deltatune
