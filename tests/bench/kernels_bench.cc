// Per-kernel microbenchmark on Qwen3.5-27B shapes (H 5120, 24 q / 4 kv heads of 256, I 17408,
// vocab 248320) with an 8192-token packed batch of ultrachat-like documents, in the kernels_bench
// executable (not a CTest test): `kernels_bench "[bench]"` (GPU only; `kernels_bench` alone also
// runs gdn_bench.cc; the attention rows are in attention_bench.cc). Prints, per kernel, the median
// time over repeats (CUDA events, after warm-up), the bytes or FLOPs counted as the fewest the op
// must move or do, and the fraction of the ceilings measured in the same run (a device-to-device
// copy; a cuBLAS 8192^3 bf16 GEMM), plus the datasheet-derived leads 4.3 TB/s and 790 TFLOP/s.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <string>

#include "kernels/attention/qk_norm_rope.h"
#include "kernels/embedding/embedding.h"
#include "kernels/loss/fused_linear_cross_entropy.h"
#include "kernels/mlp/swiglu.h"
#include "kernels/norm/rmsnorm.h"
#include "kernels/optim/adamw.h"
#include "kernels/optim/grad_norm.h"
#include "tests/bench/qwen27b_shapes.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;
using namespace bench;

// Embedding: ids spread evenly, and ids drawn as text's are (Zipf: rank r with weight 1 / (r + 1),
// the most frequent token about 8% of the batch), where one id's rows make runs of hundreds.
void embedding_rows(std::mt19937& rng, const Ceilings& ceil) {
    const size_t th = static_cast<size_t>(kTokens * kHidden);
    std::vector<double> zipf(static_cast<size_t>(kVocab));
    for (size_t r = 0; r < zipf.size(); ++r) zipf[r] = 1.0 / static_cast<double>(r + 1);
    std::discrete_distribution<int32_t> text_id(zipf.begin(), zipf.end());
    DeviceBuffer<uint16_t> table(
        Bf16Fill{static_cast<size_t>(static_cast<size_t>(kVocab * kHidden)), 1.0f});
    DeviceBuffer<uint16_t> out(th), dout(Bf16Fill{static_cast<size_t>(th), 1.0f});
    DeviceBuffer<float> dtable(static_cast<size_t>(kVocab * kHidden));
    REQUIRE(cudaMemset(dtable.get(), 0, dtable.size() * 4) == cudaSuccess);
    const size_t wsb = embedding_backward_workspace_bytes(kTokens, kHidden);
    DeviceBuffer<char> ws(wsb);
    for (bool text : {false, true}) {
        std::vector<int32_t> ids(kTokens);
        for (auto& id : ids) id = text ? text_id(rng) : static_cast<int32_t>(rng() % 32000);
        std::vector<int32_t> uniq = ids;
        std::sort(uniq.begin(), uniq.end());
        const double unique =
            static_cast<double>(std::unique(uniq.begin(), uniq.end()) - uniq.begin());
        DeviceBuffer<int32_t> d_ids(ids);
        if (!text) {
            row("embedding forward",
                median_ms(
                    [&] {
                        return embedding_forward(bf16_ptr(out), bf16_ptr(table), d_ids.get(),
                                                 kTokens, kHidden, nullptr);
                    },
                    20),
                2.0 * 2 * th, 0, ceil);
        }
        // As the GPU model runs it: the ids' order sorted on the host with the batch.
        std::vector<int32_t> sorted_ids(ids.size()), sorted_tokens(ids.size());
        embedding_id_order(ids.data(), kTokens, sorted_ids.data(), sorted_tokens.data());
        DeviceBuffer<int32_t> d_sorted_ids(sorted_ids), d_sorted_tokens(sorted_tokens);
        const double bytes = 2.0 * th + 2 * 4 * unique * kHidden;
        row(text ? "embedding backward (text-like ids)" : "embedding backward (even ids)",
            median_ms(
                [&] {
                    return embedding_backward_sorted(dtable.get(), bf16_ptr(dout),
                                                     d_sorted_ids.get(), d_sorted_tokens.get(),
                                                     kTokens, kHidden, ws.get(), wsb, nullptr);
                },
                20),
            bytes, 0, ceil);
        row(text ? "  sorting on the device (text-like)" : "  sorting on the device (even)",
            median_ms(
                [&] {
                    return embedding_backward(dtable.get(), bf16_ptr(dout), d_ids.get(), kTokens,
                                              kHidden, kVocab, ws.get(), wsb, nullptr);
                },
                20),
            bytes, 0, ceil);
    }
}

TEST_CASE("kernel benchmark on Qwen3.5-27B shapes", "[bench]") {
    if (!have_gpu()) return;
    std::mt19937 rng(7);
    Ceilings ceil;
    cublasHandle_t blas = nullptr;
    REQUIRE(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
    measure_ceilings(blas, ceil);
    const auto lengths = ultrachat_like_lengths(rng);
    const auto cu = awkward_cu_seqlens(lengths);
    const auto pos = positions_from_cu(cu);
    std::printf("batch: %lld tokens in %zu documents\n", static_cast<long long>(kTokens),
                lengths.size());
    const size_t th = static_cast<size_t>(kTokens * kHidden);
    DeviceBuffer<int32_t> d_cu(cu), d_pos(pos);

    embedding_rows(rng, ceil);
    {  // RMSNorm + residual.
        DeviceBuffer<uint16_t> x(Bf16Fill{static_cast<size_t>(th), 1.0f}),
            r(Bf16Fill{static_cast<size_t>(th), 1.0f}),
            w(Bf16Fill{static_cast<size_t>(kHidden), 0.1f}), y(th), s(th), ds(th);
        DeviceBuffer<float> rstd(kTokens), dw(kHidden);
        REQUIRE(cudaMemset(dw.get(), 0, kHidden * 4) == cudaSuccess);
        const size_t wsb = rmsnorm_backward_workspace_bytes(kTokens, kHidden);
        DeviceBuffer<char> ws(wsb);
        row("rmsnorm+residual forward",
            median_ms(
                [&] {
                    return rmsnorm_residual_forward(bf16_ptr(y), bf16_ptr(s), rstd.get(),
                                                    bf16_ptr(x), bf16_ptr(r), bf16_ptr(w), kTokens,
                                                    kHidden, 1e-6f, nullptr);
                },
                20),
            4.0 * 2 * th, 0, ceil);
        row("rmsnorm+residual backward",
            median_ms(
                [&] {
                    return rmsnorm_residual_backward(
                        bf16_ptr(ds), dw.get(), bf16_ptr(y), bf16_ptr(r), bf16_ptr(s), bf16_ptr(w),
                        rstd.get(), kTokens, kHidden, ws.get(), wsb, nullptr);
                },
                20),
            4.0 * 2 * th, 0, ceil);
    }
    {  // q norm + RoPE straight out of q_proj's interleaved output.
        const size_t qn = static_cast<size_t>(kTokens * kQHeads * kHeadDim);
        DeviceBuffer<uint16_t> qg(Bf16Fill{static_cast<size_t>(2 * qn), 1.0f}), out(qn),
            dout(Bf16Fill{static_cast<size_t>(qn), 1.0f}), dqg(2 * qn),
            w(Bf16Fill{static_cast<size_t>(kHeadDim), 0.1f});
        DeviceBuffer<float> rstd(static_cast<size_t>(kTokens * kQHeads)), dw(kHeadDim);
        REQUIRE(cudaMemset(dw.get(), 0, kHeadDim * 4) == cudaSuccess);
        const size_t wsb = qk_norm_rope_backward_workspace_bytes(kTokens, kQHeads, kHeadDim);
        DeviceBuffer<char> ws(wsb);
        // Straight out of q_proj's interleaved output, and on contiguous (tokens, heads,
        // head_dim) rows: what reading every other 512 bytes costs.
        auto qk_rows = [&](const std::string& label, const __nv_bfloat16* x, __nv_bfloat16* dx,
                           int64_t head_stride) {
            const int64_t token_stride = kQHeads * head_stride;
            row(("q norm+rope forward " + label).c_str(),
                median_ms(
                    [&] {
                        return qk_norm_rope_forward(bf16_ptr(out), rstd.get(), x, token_stride,
                                                    head_stride, bf16_ptr(w), d_pos.get(), kTokens,
                                                    kQHeads, kHeadDim, 64, 1e7, 1e-6f, nullptr);
                    },
                    20),
                2.0 * 2 * qn, 0, ceil);
            row(("q norm+rope backward " + label).c_str(),
                median_ms(
                    [&] {
                        return qk_norm_rope_backward(dx, dw.get(), bf16_ptr(dout), x, token_stride,
                                                     head_stride, bf16_ptr(w), rstd.get(),
                                                     d_pos.get(), kTokens, kQHeads, kHeadDim, 64,
                                                     1e7, ws.get(), wsb, nullptr);
                    },
                    20),
                3.0 * 2 * qn, 0, ceil);
        };
        qk_rows("(24 heads)", bf16_ptr(qg), bf16_ptr(dqg), 2 * kHeadDim);
        qk_rows("(contiguous)", bf16_ptr(dout), bf16_ptr(dqg), kHeadDim);
    }
    {  // SwiGLU.
        const size_t n = static_cast<size_t>(kTokens * kInter);
        DeviceBuffer<uint16_t> g(Bf16Fill{static_cast<size_t>(n), 1.0f}),
            u(Bf16Fill{static_cast<size_t>(n), 1.0f}), h(n),
            dh(Bf16Fill{static_cast<size_t>(n), 1.0f}), dg(n), du(n);
        row("swiglu forward",
            median_ms(
                [&] { return swiglu_forward(bf16_ptr(h), bf16_ptr(g), bf16_ptr(u), n, nullptr); },
                20),
            3.0 * 2 * n, 0, ceil);
        row("swiglu backward",
            median_ms(
                [&] {
                    return swiglu_backward(bf16_ptr(dg), bf16_ptr(du), bf16_ptr(dh), bf16_ptr(g),
                                           bf16_ptr(u), n, nullptr);
                },
                20),
            5.0 * 2 * n, 0, ceil);
    }
    {  // AdamW and the gradient norm over 64 tensors of 4M params (256M in all).
        const int count = 64;
        const int64_t each = 4 << 20;
        const size_t total = static_cast<size_t>(count * each);
        DeviceBuffer<float> p(F32Fill{static_cast<size_t>(total), 1.0f}),
            m(F32Fill{static_cast<size_t>(total), 1e-3f}), v(total),
            gr(F32Fill{static_cast<size_t>(total), 1e-2f});
        REQUIRE(cudaMemset(v.get(), 0, total * 4) == cudaSuccess);
        DeviceBuffer<uint16_t> pb(total);
        std::vector<AdamWTensorArgs> args;
        std::vector<GradNormTensor> gn;
        for (int i = 0; i < count; ++i) {
            const int64_t o = i * each;
            args.push_back(
                {p.get() + o, m.get() + o, v.get() + o, gr.get() + o, bf16_ptr(pb) + o, each, 0});
            gn.push_back({gr.get() + o, each, 0});
        }
        const int64_t chunks = adamw_plan_chunks(args.data(), count);
        const int64_t gchunks = grad_norm_plan_chunks(gn.data(), count);
        DeviceBuffer<AdamWTensorArgs> d_args(args);
        DeviceBuffer<GradNormTensor> d_gn(gn);
        DeviceBuffer<float> norm(2);
        const size_t wsb = grad_norm_workspace_bytes(gchunks);
        DeviceBuffer<char> ws(wsb);
        AdamWHyper hyper;
        row("adamw multi-tensor (256M params)",
            median_ms(
                [&] {
                    return adamw_multi_tensor_step(d_args.get(), count, chunks, hyper, 3,
                                                   norm.get() + 1, nullptr);
                },
                10),
            30.0 * total, 0, ceil);
        row("global grad norm (256M params)",
            median_ms(
                [&] {
                    return global_grad_norm(norm.get(), norm.get() + 1, d_gn.get(), count, gchunks,
                                            1.0f, ws.get(), wsb, nullptr);
                },
                10),
            4.0 * total, 0, ceil);
    }
    {  // Fused linear cross-entropy vs its three GEMMs alone.
        DeviceBuffer<uint16_t> x(Bf16Fill{static_cast<size_t>(th), 1.0f}),
            w(Bf16Fill{static_cast<size_t>(static_cast<size_t>(kVocab * kHidden)), 0.02f}), dx(th);
        DeviceBuffer<float> dw(static_cast<size_t>(kVocab * kHidden)), loss(1), rows(kTokens),
            lse(kTokens);
        REQUIRE(cudaMemset(dw.get(), 0, dw.size() * 4) == cudaSuccess);
        std::vector<int32_t> targets(kTokens);
        for (auto& t : targets) t = rng() % 5 ? static_cast<int32_t>(rng() % kVocab) : -100;
        DeviceBuffer<int32_t> d_t(targets);
        FusedLinearCrossEntropyArgs a;
        a.loss = loss.get();
        a.row_losses = rows.get();
        a.lse = lse.get();
        a.dx = bf16_ptr(dx);
        a.dw = dw.get();
        a.x = bf16_ptr(x);
        a.w = bf16_ptr(w);
        a.targets = d_t.get();
        a.tokens = kTokens;
        a.hidden = kHidden;
        a.vocab = kVocab;
        a.grad_scale = 1.0f / kTokens;
        a.chunk_tokens = 1024;
        const size_t wsb = fused_linear_cross_entropy_workspace_bytes(a);
        DeviceBuffer<char> ws(wsb);
        const double flops = 6.0 * kTokens * kVocab * kHidden;
        const double fused = median_ms(
            [&] { return fused_linear_cross_entropy(a, blas, ws.get(), wsb, nullptr); }, 3);
        row("fused linear cross-entropy", fused, 0, flops, ceil);
        {  // Larger chunks: fewer passes of the fp32 dW accumulation over the vocabulary.
            FusedLinearCrossEntropyArgs big = a;
            big.chunk_tokens = 4096;
            const size_t bigb = fused_linear_cross_entropy_workspace_bytes(big);
            DeviceBuffer<char> bigws(bigb);
            const double t = median_ms(
                [&] { return fused_linear_cross_entropy(big, blas, bigws.get(), bigb, nullptr); },
                3);
            row("fused linear cross-entropy (4096-token chunks)", t, 0, flops, ceil);
        }
        // The same three GEMMs per chunk, without the softmax kernel.
        auto* logits = reinterpret_cast<__nv_bfloat16*>(ws.get());
        const float one = 1, zero = 0;
        const int h = kHidden, v = kVocab, rows_c = 1024;
        const double gemms = median_ms(
            [&] {
                bool ok = true;
                for (int64_t t0 = 0; t0 < kTokens; t0 += rows_c) {
                    const auto* xc = bf16_ptr(x) + t0 * kHidden;
                    ok &= cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, v, rows_c, h, &one,
                                       bf16_ptr(w), CUDA_R_16BF, h, xc, CUDA_R_16BF, h, &zero,
                                       logits, CUDA_R_16BF, v, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
                    ok &= cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, h, rows_c, v, &one,
                                       bf16_ptr(w), CUDA_R_16BF, h, logits, CUDA_R_16BF, v, &zero,
                                       bf16_ptr(dx) + t0 * kHidden, CUDA_R_16BF, h,
                                       CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
                    ok &= cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, h, v, rows_c, &one, xc,
                                       CUDA_R_16BF, h, logits, CUDA_R_16BF, v, &one, dw.get(),
                                       CUDA_R_32F, h, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
                }
                return ok ? cudaSuccess : cudaErrorUnknown;
            },
            3);
        row("  its 3 GEMMs alone (cuBLAS)", gemms, 0, flops, ceil);
        std::printf("fused / GEMMs alone = %.3f\n", fused / gemms);
    }
    cublasDestroy(blas);
}
// The embedding rows alone (hidden: run by name, for trying a change to those kernels).
TEST_CASE("embedding benchmark alone", "[.][bench][embedding_bench]") {
    if (!have_gpu()) return;
    std::mt19937 rng(7);  // the same ids as the full benchmark's
    Ceilings ceil;
    cublasHandle_t blas = nullptr;
    REQUIRE(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
    measure_ceilings(blas, ceil);
    cublasDestroy(blas);
    (void)ultrachat_like_lengths(rng);  // drawn first in the full benchmark
    embedding_rows(rng, ceil);
}
#endif

}  // namespace
}  // namespace deltatune
