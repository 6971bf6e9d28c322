// FP8 GEMMs through the runtime's cuBLASLt runner, on operands quantised by kernels/tensor/fp8.h,
// in the three forms of a linear layer: equal (to fp32 accumulation and output rounding) to the
// fp64 product of the dequantised operands, and within the format's error bound of the bf16
// operands' exact product. Per-row (outer-vector) and per-tensor scales; e5m2 for a gradient
// operand; the padded inner dimension of the weight-gradient form. [cuda]: skipped with a printed
// reason where no GPU is present.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/tensor/fp8.h"
#include "runtime/device/gemm.h"
#include "runtime/device/linear_fp8.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

// An FP8 operand on the host and the device: codes (rows, ld) and one factor per row.
struct Fp8Operand {
    std::vector<uint8_t> q;
    std::vector<float> d;
    int64_t rows = 0, ld = 0;
    Fp8Format f = Fp8Format::kE4M3;
    double value(int64_t r, int64_t c) const {
        return static_cast<double>(d[d.size() == 1 ? 0 : static_cast<size_t>(r)]) *
               fp8_decode_ref(q[static_cast<size_t>(r * ld + c)], f);
    }
};

// `x` (rows, cols) quantised by the device kernel: per row, or (transposed) per column into
// (cols, ld).
Fp8Operand quantize_on_device(const Bf16Data& x, int64_t rows, int64_t cols, bool transposed,
                              int64_t ld, Fp8Format f) {
    DeviceBuffer<uint16_t> in(x.bits);
    Fp8Operand o;
    o.f = f;
    o.rows = transposed ? cols : rows;
    o.ld = transposed ? ld : cols;
    DeviceBuffer<uint8_t> q(static_cast<size_t>(o.rows * o.ld));
    DeviceBuffer<float> d(static_cast<size_t>(o.rows)), scratch(static_cast<size_t>(cols));
    const cudaError_t e =
        transposed ? quantize_transposed_fp8(q.get(), d.get(), scratch.get(), bf16_ptr(in), rows,
                                             cols, ld, f, nullptr)
                   : quantize_rows_fp8(q.get(), d.get(), bf16_ptr(in), rows, cols, f, nullptr);
    REQUIRE(e == cudaSuccess);
    o.q = q.download();
    o.d = d.download();
    return o;
}

// One scale for the whole of `v` (rows, cols) (the per-tensor mode), quantised by the reference.
Fp8Operand per_tensor(const std::vector<float>& v, int64_t rows, int64_t cols, Fp8Format f) {
    Fp8Operand o;
    o.f = f, o.rows = rows, o.ld = cols;
    float amax = 0;
    for (const float x : v) amax = std::max(amax, std::fabs(x));
    o.d.assign(1, fp8_dequant_factor(amax, f));
    for (const float x : v) o.q.push_back(fp8_encode_ref(static_cast<double>(x) / o.d[0], f));
    return o;
}

// C (m, n) = beta C0 + A B^T through Gemm::run with FP8 operands; checks it against the fp64
// product of the dequantised operands, and against the exact product of the bf16 values a_f
// (m, k) and b_f (n, k) within the quantisation bound.
void check_fp8_gemm(Gemm& g, const Fp8Operand& a, const Fp8Operand& b,
                    const std::vector<float>& a_f, const std::vector<float>& b_f, int64_t m,
                    int64_t n, int64_t k, GemmOut out, float beta, bool per_tensor_scale) {
    DeviceBuffer<uint8_t> da(a.q), db(b.q);
    DeviceBuffer<float> sa(a.d), sb(b.d);
    std::mt19937 rng(3);
    // C's prior contents for beta 1 (bf16 values where C is bf16), else poison.
    std::vector<float> c0 = beta != 0 ? random_f32(static_cast<size_t>(m * n), rng)
                                      : std::vector<float>(static_cast<size_t>(m * n), 0.0f);
    std::vector<uint16_t> c0_bits(c0.size());
    for (size_t i = 0; i < c0.size(); ++i) {
        c0_bits[i] = float_to_bf16_bits(c0[i]);
        if (out == GemmOut::kBF16) c0[i] = bf16_bits_to_float(c0_bits[i]);
    }
    DeviceBuffer<float> c_f32(c0);
    DeviceBuffer<uint16_t> c_bf16(c0_bits);
    if (beta == 0) c_bf16.poison();
    GemmArgs x;
    x.a = da.get(), x.lda = a.ld, x.b = db.get(), x.trans_b = true, x.ldb = b.ld;
    x.c = out == GemmOut::kF32 ? static_cast<void*>(c_f32.get()) : c_bf16.get();
    x.c_type = out, x.ldc = n, x.m = m, x.n = n, x.k = k, x.beta = beta;
    x.a_type = a.f == Fp8Format::kE4M3 ? GemmIn::kE4M3 : GemmIn::kE5M2;
    x.b_type = b.f == Fp8Format::kE4M3 ? GemmIn::kE4M3 : GemmIn::kE5M2;
    x.a_scale = sa.get(), x.b_scale = sb.get(), x.per_tensor_scale = per_tensor_scale;
    const absl::Status st = g.run(x, nullptr);
    INFO(st.message());
    REQUIRE(st.ok());
    const std::vector<float> got =
        out == GemmOut::kF32 ? c_f32.download() : to_float(c_bf16.download());
    std::vector<float> want(got.size());
    double worst_vs_bf16 = 0;  // |C - exact bf16 product| over its bound, worst element
    const double unit = a.f == Fp8Format::kE4M3 ? 1.0 / 16 : 1.0 / 8;  // a's half ulp, relative
    const double bound_unit = unit + 1.0 / 16 + unit / 16;             // with b's (e4m3)
    const double out_unit = out == GemmOut::kF32 ? 1e-6 : 1.0 / 256;
    // The bf16 values' row lengths: k, or the token count where k is padded past it.
    const int64_t a_cols = static_cast<int64_t>(a_f.size()) / m;
    const int64_t b_cols = static_cast<int64_t>(b_f.size()) / n;
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double deq = 0, exact = 0, magnitude = 0;
            for (int64_t p = 0; p < k; ++p) {
                deq += a.value(i, p) * b.value(j, p);
                const double av = p < a_cols ? a_f[static_cast<size_t>(i * a_cols + p)] : 0.0;
                const double bv = p < b_cols ? b_f[static_cast<size_t>(j * b_cols + p)] : 0.0;
                exact += av * bv;
                magnitude += std::fabs(av * bv);
            }
            const size_t o = static_cast<size_t>(i * n + j);
            const double base = beta != 0 ? c0[o] : 0.0;
            want[o] = static_cast<float>(base + deq);
            // Quantisation (both operands) plus the output's rounding.
            const double bound =
                bound_unit * magnitude + out_unit * std::fabs(base + exact) + 1e-20;
            worst_vs_bf16 = std::max(worst_vs_bf16, std::fabs(got[o] - (base + exact)) / bound);
        }
    }
    INFO("m " << m << ", n " << n << ", k " << k
              << (per_tensor_scale ? ", per tensor" : ", per row")
              << ", worst error / bound against the bf16 product " << worst_vs_bf16);
    CHECK(rel_err(got, want) < (out == GemmOut::kF32 ? 1e-5 : 4e-3));
    CHECK(worst_vs_bf16 <= 1.0);
}

TEST_CASE("cuBLASLt FP8 GEMMs: the linear forms against fp64, per-row and per-tensor scales",
          "[runtime][cuda]") {
    if (!have_gpu()) return;
    int major = 0, minor = 0;
    REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
    REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess);
    if (!fp8_gpu_supported(10 * major + minor)) {
        WARN("skipped: per-row FP8 scales are cuBLASLt's on Hopper only");
        return;
    }
    DeviceBuffer<char> workspace(size_t{32} << 20);
    auto g = Gemm::create(workspace.get(), workspace.size(), /*time_candidates=*/false);
    REQUIRE(g.ok());
    std::mt19937 rng(20261208);
    const int64_t rows = 200, in = 192, out = 272;  // 200 tokens: not a multiple of 16
    const Bf16Data x = random_bf16(static_cast<size_t>(rows * in), rng),
                   w = random_bf16(static_cast<size_t>(out * in), rng, 0.05f),
                   dy = random_bf16(static_cast<size_t>(rows * out), rng, 1e-3f);
    const auto e4m3 = Fp8Format::kE4M3, e5m2 = Fp8Format::kE5M2;
    SECTION("forward y = x W^T, bf16 out") {
        const Fp8Operand qx = quantize_on_device(x, rows, in, false, 0, e4m3);
        const Fp8Operand qw = quantize_on_device(w, out, in, false, 0, e4m3);
        check_fp8_gemm(**g, qx, qw, x.f, w.f, rows, out, in, GemmOut::kBF16, 0.0f, false);
        check_fp8_gemm(**g, per_tensor(x.f, rows, in, e4m3), per_tensor(w.f, out, in, e4m3), x.f,
                       w.f, rows, out, in, GemmOut::kBF16, 0.0f, true);
    }
    SECTION("input gradient dx = dy W (and dx += dy W): dy in e5m2, W^T stored") {
        const Fp8Operand qdy = quantize_on_device(dy, rows, out, false, 0, e5m2);
        const Fp8Operand qwt = quantize_on_device(w, out, in, true, out, e4m3);
        std::vector<float> wt(static_cast<size_t>(in * out));  // W^T's values, (in, out)
        for (int64_t o = 0; o < out; ++o) {
            for (int64_t i = 0; i < in; ++i) wt[i * out + o] = w.f[o * in + i];
        }
        check_fp8_gemm(**g, qdy, qwt, dy.f, wt, rows, in, out, GemmOut::kBF16, 0.0f, false);
        // Accumulated onto a prior dx (two branches meeting at one input).
        check_fp8_gemm(**g, qdy, qwt, dy.f, wt, rows, in, out, GemmOut::kBF16, 1.0f, false);
    }
    SECTION("weight gradient dW += dy^T x: fp32, accumulated, tokens padded to 208") {
        const int64_t ld = 208;
        const Fp8Operand qdyt = quantize_on_device(dy, rows, out, true, ld, e5m2);
        const Fp8Operand qxt = quantize_on_device(x, rows, in, true, ld, e4m3);
        std::vector<float> dyt(static_cast<size_t>(out * rows)), xt(static_cast<size_t>(in * rows));
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t o = 0; o < out; ++o) dyt[o * rows + r] = dy.f[r * out + o];
            for (int64_t i = 0; i < in; ++i) xt[i * rows + r] = x.f[r * in + i];
        }
        check_fp8_gemm(**g, qdyt, qxt, dyt, xt, out, in, ld, GemmOut::kF32, 1.0f, false);
    }
    SECTION("refused: a bf16 operand beside an FP8 one, the wrong layout, an odd k") {
        GemmArgs a;
        a.m = 16, a.n = 16, a.k = 16, a.lda = 16, a.ldb = 16, a.ldc = 16, a.trans_b = true;
        a.a_type = GemmIn::kE4M3;
        float s = 1;
        a.a_scale = &s, a.b_scale = &s;
        CHECK(absl::IsInvalidArgument((*g)->run(a, nullptr)));
        a.b_type = GemmIn::kE4M3, a.trans_b = false;
        CHECK(absl::IsInvalidArgument((*g)->run(a, nullptr)));
        a.trans_b = true, a.k = 24, a.lda = 24, a.ldb = 24;
        CHECK(absl::IsInvalidArgument((*g)->run(a, nullptr)));
    }
}
#endif

}  // namespace
}  // namespace deltatune
