// Gated DeltaNet kernel timings at the Qwen3.5-9B (16 key / 32 value heads) and 27B (16 / 48)
// head shapes, dim 128, one 8192-token sequence, printed next to the published H200 figures for
// one 9B layer (flash-linear-attention 0.472 ms forward / 1.444 ms backward; FlashQLA 0.280 /
// 0.789). In the kernels_bench executable: `kernels_bench "[gdn_bench]"`. Median of CUDA-event
// timings after warm-up, on random data.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "kernels/gdn/causal_conv1d.h"
#include "kernels/gdn/gdn_chunked_rule.h"
#include "kernels/norm/gated_rmsnorm.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/qwen27b_shapes.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;
using namespace bench;

// FNV-1a over a device buffer's bytes: two builds whose kernels claim the same results print the
// same digests.
template <typename T>
uint64_t digest(const DeviceBuffer<T>& b) {
    uint64_t h = 1469598103934665603ull;
    for (const T& x : b.download()) {
        const auto* p = reinterpret_cast<const unsigned char*>(&x);
        for (size_t i = 0; i < sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

// cu_seqlens of 8192 tokens in lognormal documents (qwen27b_shapes.h), the same every call.
std::vector<int32_t> lognormal_cu_seqlens() {
    std::mt19937 rng(7);
    std::vector<int32_t> cu = {0};
    for (int32_t l : ultrachat_like_lengths(rng)) cu.push_back(cu.back() + l);
    return cu;
}

// What a training step runs: forward_saving, then backward_from_saved, on 8192 tokens in
// lognormal documents (qwen27b_shapes.h), with digests of what the pair writes.
void time_training_path(GatedDeltaRuleArgs args, const GatedDeltaRuleGrads& grads,
                        __nv_bfloat16* out, const __nv_bfloat16* dout) {
    const std::vector<int32_t> cu = lognormal_cu_seqlens();
    DeviceBuffer<int32_t> d_cu(cu);
    args.cu_seqlens = d_cu.get();
    args.num_docs = static_cast<int64_t>(cu.size()) - 1;
    DeviceBuffer<char> saved(gated_delta_rule_saved_bytes(args.tokens, args.v_heads));
    const size_t scratch_bytes = gated_delta_rule_backward_scratch_bytes(args.tokens, args.v_heads);
    DeviceBuffer<char> scratch(scratch_bytes);
    const double f = median_ms(
        [&] {
            return gated_delta_rule_forward_saving(out, args, saved.get(), saved.size(), nullptr);
        },
        20);
    const double b = median_ms(
        [&] {
            return gated_delta_rule_backward_from_saved(grads, dout, args, saved.get(),
                                                        scratch.get(), scratch_bytes, nullptr);
        },
        20);
    std::printf("%-28s %10.3f %10.3f   (27B shape, training path, %lld lognormal documents)\n",
                "chunked gated delta rule", f, b, static_cast<long long>(args.num_docs));
}

TEST_CASE("gated deltanet kernel timings at the Qwen3.5 head shapes", "[bench][gdn_bench]") {
    if (!have_gpu()) return;
    constexpr int64_t kTokens = 8192, kDim = 128, kKHeads = 16;
    const std::vector<int32_t> cu = {0, static_cast<int32_t>(kTokens)};
    DeviceBuffer<int32_t> d_cu(cu);
    std::printf("%-28s %10s %10s   %s\n", "kernel (8192 tokens)", "fwd ms", "bwd ms",
                "published H200, 9B shape: FLA 0.472 / 1.444, FlashQLA 0.280 / 0.789");
    for (int64_t v_heads : {32, 48}) {
        const size_t nk = static_cast<size_t>(kTokens * kKHeads * kDim);
        const size_t nv = static_cast<size_t>(kTokens * v_heads * kDim);
        const size_t ng = static_cast<size_t>(kTokens * v_heads);
        DeviceBuffer<uint16_t> q(Bf16Fill{nk, 1.0f}), k(Bf16Fill{nk + 7, 1.0f}),
            v(Bf16Fill{nv, 1.0f}), a(Bf16Fill{ng, 1.0f}), b(Bf16Fill{ng + 3, 1.0f}),
            dout(Bf16Fill{nv + 5, 1.0f}), out(nv), dq(nk), dk(nk), dv(nv), da(ng), db(ng);
        std::vector<float> A_log(static_cast<size_t>(v_heads)), dt_bias(A_log.size());
        for (size_t h = 0; h < A_log.size(); ++h) {
            A_log[h] = std::log(1.0f + 15.0f * static_cast<float>(h) / A_log.size());
            dt_bias[h] = -1.0f + 0.05f * static_cast<float>(h);
        }
        DeviceBuffer<float> d_A(A_log), d_dt(dt_bias), dA(A_log.size()), ddt(A_log.size());
        const size_t wsb = gated_delta_rule_backward_workspace_bytes(kTokens, v_heads);
        DeviceBuffer<char> ws(wsb);
        const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
        GatedDeltaRuleArgs args;
        args.q = bf16_ptr(q);
        args.k = bf16_ptr(k);
        args.v = bf16_ptr(v);
        args.a = bf16_ptr(a);
        args.b = bf16_ptr(b);
        args.A_log = d_A.get();
        args.dt_bias = d_dt.get();
        args.cu_seqlens = d_cu.get();
        args.num_docs = 1;
        args.tokens = kTokens;
        args.k_heads = kKHeads;
        args.v_heads = v_heads;
        args.scale = scale;
        GatedDeltaRuleGrads grads;
        grads.dq = bf16_ptr(dq);
        grads.dk = bf16_ptr(dk);
        grads.dv = bf16_ptr(dv);
        grads.da = bf16_ptr(da);
        grads.db = bf16_ptr(db);
        grads.dA_log = dA.get();
        grads.ddt_bias = ddt.get();
        auto timings = [&](const GatedDeltaRuleArgs& x) {
            const double f = median_ms(
                [&] { return gated_delta_rule_forward(bf16_ptr(out), x, ws.get(), wsb, nullptr); },
                20);
            const double b = median_ms(
                [&] {
                    return gated_delta_rule_backward(grads, bf16_ptr(dout), x, ws.get(), wsb,
                                                     nullptr);
                },
                20);
            return std::make_pair(f, b);
        };
        const auto [fwd, bwd] = timings(args);
        if (v_heads == 48) time_training_path(args, grads, bf16_ptr(out), bf16_ptr(dout));
        std::printf("%-28s %10.3f %10.3f   (%s shape: 16 key / %lld value heads)\n",
                    "chunked gated delta rule", fwd, bwd, v_heads == 32 ? "9B" : "27B",
                    static_cast<long long>(v_heads));
        // dA_log and ddt_bias accumulate over the timed runs; the rest are written.
        std::printf("%-28s out %016llx dq %016llx dk %016llx dv %016llx da %016llx db %016llx\n",
                    "  result digests", static_cast<unsigned long long>(digest(out)),
                    static_cast<unsigned long long>(digest(dq)),
                    static_cast<unsigned long long>(digest(dk)),
                    static_cast<unsigned long long>(digest(dv)),
                    static_cast<unsigned long long>(digest(da)),
                    static_cast<unsigned long long>(digest(db)));
        if (v_heads == 32) {  // the same 8192 tokens as 8 documents (FLA bwd 1.500 ms here)
            std::vector<int32_t> cu8;
            for (int d = 0; d <= 8; ++d) cu8.push_back(d * 1024);
            DeviceBuffer<int32_t> d_cu8(cu8);
            GatedDeltaRuleArgs docs8 = args;
            docs8.cu_seqlens = d_cu8.get();
            docs8.num_docs = 8;
            const auto [fwd8, bwd8] = timings(docs8);
            std::printf("%-28s %10.3f %10.3f   (9B shape, 8 documents of 1024 tokens)\n",
                        "chunked gated delta rule", fwd8, bwd8);
        }

        // The conv over the q, k, v channels and the gated output norm of the same layer.
        const int64_t channels = 2 * kKHeads * kDim + v_heads * kDim;
        const size_t nc = static_cast<size_t>(kTokens * channels);
        DeviceBuffer<uint16_t> x(Bf16Fill{nc, 1.0f}), y(nc), dy(Bf16Fill{nc + 1, 1.0f}), dx(nc),
            w(Bf16Fill{static_cast<size_t>(channels * 4), 0.5f});
        DeviceBuffer<float> dw(static_cast<size_t>(channels * 4));
        const size_t cwb = causal_conv1d_backward_workspace_bytes(kTokens, channels, 4);
        DeviceBuffer<char> cws(cwb);
        const double cf = median_ms(
            [&] {
                return causal_conv1d_forward(bf16_ptr(y), bf16_ptr(x), bf16_ptr(w), d_cu.get(), 1,
                                             kTokens, channels, 4, nullptr);
            },
            20);
        const double cb = median_ms(
            [&] {
                return causal_conv1d_backward(bf16_ptr(dx), dw.get(), bf16_ptr(dy), bf16_ptr(x),
                                              bf16_ptr(w), d_cu.get(), 1, kTokens, channels, 4,
                                              cws.get(), cwb, nullptr);
            },
            20);
        std::printf(
            "%-28s %10.3f %10.3f   (%lld channels; bytes-floor %.3f / %.3f ms at 4.3 TB/s)\n",
            "causal conv1d + silu", cf, cb, static_cast<long long>(channels), 2.0 * 2 * nc / 4.3e9,
            3.0 * 2 * nc / 4.3e9);
        {  // Digests of one forward and backward over lognormal documents (boundaries inside).
            const std::vector<int32_t> cu = lognormal_cu_seqlens();
            DeviceBuffer<int32_t> d_docs(cu);
            const auto docs = static_cast<int64_t>(cu.size()) - 1;
            REQUIRE(cudaMemset(dw.get(), 0, dw.size() * sizeof(float)) == cudaSuccess);
            REQUIRE(causal_conv1d_forward(bf16_ptr(y), bf16_ptr(x), bf16_ptr(w), d_docs.get(), docs,
                                          cu.back(), channels, 4, nullptr) == cudaSuccess);
            REQUIRE(causal_conv1d_backward(bf16_ptr(dx), dw.get(), bf16_ptr(dy), bf16_ptr(x),
                                           bf16_ptr(w), d_docs.get(), docs, cu.back(), channels, 4,
                                           cws.get(), cwb, nullptr) == cudaSuccess);
            std::printf("%-28s out %016llx dx %016llx dw %016llx (%lld documents)\n",
                        "  result digests", static_cast<unsigned long long>(digest(y)),
                        static_cast<unsigned long long>(digest(dx)),
                        static_cast<unsigned long long>(digest(dw)), static_cast<long long>(docs));
        }
        const int64_t rows = kTokens * v_heads;
        DeviceBuffer<uint16_t> z(Bf16Fill{nv + 11, 1.0f}), nw(Bf16Fill{kDim, 1.0f}), dz(nv);
        DeviceBuffer<float> rstd(static_cast<size_t>(rows)), dnw(kDim);
        const size_t nwb = gated_rmsnorm_backward_workspace_bytes(rows, kDim);
        DeviceBuffer<char> nws(nwb);
        const double nf = median_ms(
            [&] {
                return gated_rmsnorm_forward(bf16_ptr(out), rstd.get(), bf16_ptr(v), bf16_ptr(z),
                                             bf16_ptr(nw), rows, kDim, 1e-6f, nullptr);
            },
            20);
        const double nb = median_ms(
            [&] {
                return gated_rmsnorm_backward(bf16_ptr(dv), bf16_ptr(dz), dnw.get(), bf16_ptr(dout),
                                              bf16_ptr(v), bf16_ptr(z), bf16_ptr(nw), rstd.get(),
                                              rows, kDim, nws.get(), nwb, nullptr);
            },
            20);
        std::printf("%-28s %10.3f %10.3f   (bytes-floor %.3f / %.3f ms at 4.3 TB/s)\n",
                    "gated rmsnorm", nf, nb, 3.0 * 2 * nv / 4.3e9, 5.0 * 2 * nv / 4.3e9);
        std::fflush(stdout);
    }
}
#endif

}  // namespace
}  // namespace deltatune
