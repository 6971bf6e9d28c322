// What FP8 projections could win, before building them into the model: for each linear layer of
// Qwen3.5-27B at 8192 tokens, the runtime's three bf16 GEMMs (y = x W^T, dx = dy W, dW += dy^T x)
// against the same products in FP8 through the same runner (e4m3 activations and weights, e5m2
// gradients, per-row scales; the forward also per-tensor and with fast accumulation), and the
// quantisation passes the FP8 forms need as standalone kernels (x and dy per row, W and W^T, dy^T
// and x^T transposed): an upper bound on their cost, since the model would fuse the activation
// passes into the kernels that produce them. Each form's variants are timed in turns.
// `kernels_bench "[fp8_gemm_bench]"` on the GPU machine.
#include <catch2/catch.hpp>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kernels/tensor/fp8.h"
#include "runtime/device/gemm.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/qwen27b_shapes.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;
using namespace bench;

constexpr size_t kWorkspace = size_t{32} << 20;  // as the runtime gives cuBLASLt

cudaError_t ok(const absl::Status& st) {
    if (!st.ok()) std::printf("  gemm: %s\n", std::string(st.message()).c_str());
    return st.ok() ? cudaSuccess : cudaErrorUnknown;
}

// The median of each variant over rounds that run every variant once, in turn.
std::vector<double> interleaved_ms(const std::vector<std::function<cudaError_t()>>& variants) {
    std::vector<std::vector<double>> ms(variants.size());
    for (const auto& v : variants) median_ms(v, 1);  // first calls: algorithm choice, warm-up
    for (int round = 0; round < 10; ++round) {
        for (size_t i = 0; i < variants.size(); ++i) ms[i].push_back(median_ms(variants[i], 1, 0));
    }
    std::vector<double> out;
    for (auto& m : ms) out.push_back(median(m));
    return out;
}

// An FP8 operand's device storage: codes and one factor per stored row.
struct Fp8Buf {
    DeviceBuffer<uint8_t> q;
    DeviceBuffer<float> d;
    Fp8Buf(int64_t rows, int64_t ld)
        : q(static_cast<size_t>(rows * ld)), d(static_cast<size_t>(rows)) {}
};

GemmArgs fp8_args(const Fp8Buf& a, GemmIn at, const Fp8Buf& b, GemmIn bt, void* c, GemmOut out,
                  int64_t m, int64_t n, int64_t k, float beta) {
    GemmArgs x;
    x.a = a.q.get(), x.lda = k, x.b = b.q.get(), x.trans_b = true, x.ldb = k;
    x.c = c, x.c_type = out, x.ldc = n, x.m = m, x.n = n, x.k = k, x.beta = beta;
    x.a_type = at, x.b_type = bt, x.a_scale = a.d.get(), x.b_scale = b.d.get();
    return x;
}

TEST_CASE("FP8 against bf16 GEMMs per linear layer, with the quantisation passes",
          "[bench][fp8_gemm_bench]") {
    if (!have_gpu()) return;
    const auto& layers = kLinears;
    DeviceBuffer<char> ws(kWorkspace);
    auto created = Gemm::create(ws.get(), kWorkspace, /*time_candidates=*/true);
    REQUIRE(created.ok());
    Gemm& g = **created;
    const auto e4 = GemmIn::kE4M3, e5 = GemmIn::kE5M2;
    const auto q4 = Fp8Format::kE4M3, q5 = Fp8Format::kE5M2;
    std::printf("%-16s %-4s %8s %8s %8s %8s %8s   (ms; TF/s of bf16 and fp8/row)\n", "linear",
                "form", "bf16", "fp8/row", "fp8/tsr", "fp8/fast", "quant");
    double sum_bf16 = 0, sum_fp8 = 0, sum_quant = 0;
    for (const LinearShape& l : layers) {
        const int64_t T = kTokens, in = l.in, out = l.out;
        DeviceBuffer<uint16_t> x(Bf16Fill{static_cast<size_t>(T * in), 1.0f}),
            w(Bf16Fill{static_cast<size_t>(in * out), 0.02f}), y(static_cast<size_t>(T * out)),
            dy(Bf16Fill{static_cast<size_t>(T * out), 1e-3f}), dx(static_cast<size_t>(T * in));
        DeviceBuffer<float> dw(static_cast<size_t>(in * out)),
            scratch(static_cast<size_t>(std::max(in, out)));
        Fp8Buf qx(T, in), qw(out, in), qdy(T, out), qwt(in, out), qdyt(out, T), qxt(in, T);
        DeviceBuffer<float> one(std::vector<float>{1.0f});
        auto quant_x = [&] {
            return quantize_rows_fp8(qx.q.get(), qx.d.get(), bf16_ptr(x), T, in, q4, {});
        };
        auto quant_w = [&] {
            return quantize_rows_fp8(qw.q.get(), qw.d.get(), bf16_ptr(w), out, in, q4, {});
        };
        auto quant_dy = [&] {
            return quantize_rows_fp8(qdy.q.get(), qdy.d.get(), bf16_ptr(dy), T, out, q5, {});
        };
        auto quant_wt = [&] {
            return quantize_transposed_fp8(qwt.q.get(), qwt.d.get(), scratch.get(), bf16_ptr(w),
                                           out, in, out, q4, {});
        };
        auto quant_dyt = [&] {
            return quantize_transposed_fp8(qdyt.q.get(), qdyt.d.get(), scratch.get(), bf16_ptr(dy),
                                           T, out, T, q5, {});
        };
        auto quant_xt = [&] {
            return quantize_transposed_fp8(qxt.q.get(), qxt.d.get(), scratch.get(), bf16_ptr(x), T,
                                           in, T, q4, {});
        };
        const std::function<cudaError_t()> passes[] = {quant_x,  quant_w,   quant_dy,
                                                       quant_wt, quant_dyt, quant_xt};
        for (const auto& q : passes) REQUIRE(q() == cudaSuccess);
        GemmArgs fwd8 = fp8_args(qx, e4, qw, e4, y.get(), GemmOut::kBF16, T, out, in, 0.0f);
        GemmArgs fwd8_tensor = fwd8, fwd8_fast = fwd8;
        fwd8_tensor.per_tensor_scale = true, fwd8_tensor.a_scale = one.get(),
        fwd8_tensor.b_scale = one.get();
        fwd8_fast.fast_accum = true;
        const GemmArgs dx8 = fp8_args(qdy, e5, qwt, e4, dx.get(), GemmOut::kBF16, T, in, out, 0.0f);
        const GemmArgs dw8 = fp8_args(qdyt, e5, qxt, e4, dw.get(), GemmOut::kF32, out, in, T, 1.0f);
        const auto fwd = interleaved_ms(
            {[&] { return ok(linear_forward(g, y.get(), x.get(), w.get(), T, in, out, {})); },
             [&] { return ok(g.run(fwd8, {})); }, [&] { return ok(g.run(fwd8_tensor, {})); },
             [&] { return ok(g.run(fwd8_fast, {})); }, quant_x, quant_w});
        const auto dgrad =
            interleaved_ms({[&] {
                                return ok(linear_backward_dx(g, dx.get(), dy.get(), w.get(), T, in,
                                                             out, false, {}));
                            },
                            [&] { return ok(g.run(dx8, {})); }, quant_dy, quant_wt});
        const auto wgrad = interleaved_ms(
            {[&] { return ok(linear_backward_dw(g, dw.get(), dy.get(), x.get(), T, in, out, {})); },
             [&] { return ok(g.run(dw8, {})); }, quant_dyt, quant_xt});
        const double tf = 2.0 * T * in * out / 1e9;
        std::printf("%-16s %-4s %8.3f %8.3f %8.3f %8.3f %8.3f   %5.0f %5.0f\n", l.name, "fwd",
                    fwd[0], fwd[1], fwd[2], fwd[3], fwd[4] + fwd[5], tf / fwd[0], tf / fwd[1]);
        std::printf("%-16s %-4s %8.3f %8.3f %8s %8s %8.3f   %5.0f %5.0f\n", "", "dx", dgrad[0],
                    dgrad[1], "", "", dgrad[2] + dgrad[3], tf / dgrad[0], tf / dgrad[1]);
        std::printf("%-16s %-4s %8.3f %8.3f %8s %8s %8.3f   %5.0f %5.0f\n", "", "dW", wgrad[0],
                    wgrad[1], "", "", wgrad[2] + wgrad[3], tf / wgrad[0], tf / wgrad[1]);
        std::fflush(stdout);
        sum_bf16 += fwd[0] + dgrad[0] + wgrad[0];
        sum_fp8 += fwd[1] + dgrad[1] + wgrad[1];
        sum_quant += fwd[4] + fwd[5] + dgrad[2] + dgrad[3] + wgrad[2] + wgrad[3];
    }
    std::printf(
        "one layer of each: bf16 %.2f ms, fp8 GEMMs %.2f ms (%.2fx), + standalone quantisation "
        "%.2f ms (%.2fx)\n",
        sum_bf16, sum_fp8, sum_bf16 / sum_fp8, sum_quant, sum_bf16 / (sum_fp8 + sum_quant));
}
#endif

}  // namespace
}  // namespace deltatune
