// The wgmma + TMA gated attention forward (attention_wgmma.cu) against attention_ref.cc
// and output_gate_forward_ref: one-token documents, empty documents, documents shorter than,
// equal to and longer than a 128-row query tile and not multiples of the 64-key tile, GQA groups
// of 1, 2, 3 and 6, the gate read in place from q_proj's interleaved layout, poisoned outputs
// ([cuda]; skipped with a printed reason where no GPU is present). Its y (the wgmma backward) or o
// (cuDNN's and the handwritten one) and lse then go through every backward of the build; a
// grid of 1 and 3 blocks, each taking several items, must give the same bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>

#include "kernels/attention/attention.h"
#include "tests/kernels/attention/attention_test_util.h"
#include "tests/kernels/common/cuda_test_util.h"
#if DELTATUNE_HAVE_CUDA
#include "kernels/attention/attention_wgmma.h"
#endif
#if DELTATUNE_HAVE_CUDNN_ATTENTION
#include "kernels/attention/attention_cudnn.h"
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

// The worst relative error of one 256-value row (a token's head) against the reference, rows
// normed against at least a tenth of the mean row norm (and 0.01: some gradients are all zero): a
// wrong or unwritten row, which the tensor's overall relative error would dilute, fails it.
double worst_row_err(const std::vector<float>& got, const std::vector<float>& ref) {
    const size_t rows = ref.size() / 256;
    std::vector<double> num(rows, 0.0), den(rows, 0.0);
    double mean = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        const double d = static_cast<double>(got[i]) - ref[i];
        num[i / 256] += d * d;
        den[i / 256] += static_cast<double>(ref[i]) * ref[i];
    }
    for (size_t r = 0; r < rows; ++r) mean += std::sqrt(den[r]) / static_cast<double>(rows);
    double worst = 0;
    for (size_t r = 0; r < rows; ++r)
        worst =
            std::max(worst, std::sqrt(num[r]) / std::max({std::sqrt(den[r]), 0.1 * mean, 1e-2}));
    return worst;
}

TEST_CASE("wgmma gated attention forward matches the reference", "[kernels][cuda]") {
    if (!have_hopper_code()) return;
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
            const AttentionCase p = attention_case(rng, cu, hq, hkv);
            const size_t qn = p.o_ref.size(), kvn = p.k.f.size();
            const std::vector<float>&o_ref = p.o_ref, &lse_ref = p.lse_ref, &y_ref = p.y_ref;

            AttentionDeviceCase dc(p, cu, *std::max_element(lengths.begin(), lengths.end()));
            auto& [d_q, d_k, d_v, d_qg, d_cu, d_y, d_o, d_lse, a] = dc;
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
            // Without o (what the model's training forward asks for: the wgmma backward takes
            // y): the same y and lse bits.
            {
                DeviceBuffer<uint16_t> y2(qn);
                DeviceBuffer<float> lse2(lse_ref.size());
                y2.poison();
                lse2.poison();
                REQUIRE(gated_attention_forward_wgmma(bf16_ptr(y2), nullptr, lse2.get(), a,
                                                      ws.get(), wsb, nullptr) == cudaSuccess);
                CHECK(y2.download() == d_y.download());
                CHECK(lse2.download() == d_lse.download());
            }
            // On a work list built once (as the model shares one among its layers): three
            // forwards in a row, each on a different number of blocks, give the same bits (each
            // leaves the list's counters as it found them).
            {
                DeviceBuffer<char> schedule(wsb);
                schedule.poison();
                REQUIRE(gated_attention_forward_wgmma_schedule(a, schedule.get(), wsb, nullptr) ==
                        cudaSuccess);
                for (const int blocks : {0, 3, 1}) {
                    DeviceBuffer<uint16_t> y2(qn);
                    DeviceBuffer<float> lse2(lse_ref.size());
                    y2.poison();
                    lse2.poison();
                    REQUIRE(gated_attention_forward_wgmma_scheduled(
                                bf16_ptr(y2), nullptr, lse2.get(), a, schedule.get(), wsb, nullptr,
                                blocks) == cudaSuccess);
                    INFO("scheduled, blocks = " << blocks);
                    CHECK(y2.download() == d_y.download());
                    CHECK(lse2.download() == d_lse.download());
                }
                CHECK(gated_attention_forward_wgmma_scheduled(bf16_ptr(d_y), nullptr, d_lse.get(),
                                                              a, schedule.get(), wsb - 1,
                                                              nullptr) == cudaErrorInvalidValue);
            }
            // A short workspace is refused, not overrun.
            CHECK(gated_attention_forward_wgmma(bf16_ptr(d_y), bf16_ptr(d_o), d_lse.get(), a,
                                                ws.get(), wsb - 1,
                                                nullptr) == cudaErrorInvalidValue);

            // This forward's o (y for the wgmma backward) and lse into the backwards, against the
            // fp32 chain.
            const AttentionGrads gr = attention_grads(rng, p, cu);
            DeviceBuffer<uint16_t> d_dy(gr.dy.bits), d_dq(qn), d_dk(kvn), d_dv(kvn), d_dqg(2 * qn);
            // Every backward this build has: the wgmma one (the default; dS tiles through
            // memory, and with no budget for them dQ by atomics), cuDNN's and the handwritten
            // mma.sync kernel.
            enum class Bwd { kWgmma, kWgmmaAtomics, kCudnn, kHandwritten };
            for (const Bwd bwd :
                 {Bwd::kWgmma, Bwd::kWgmmaAtomics, Bwd::kCudnn, Bwd::kHandwritten}) {
                if (bwd == Bwd::kCudnn && !kHaveCudnn) continue;
                const std::string name = bwd == Bwd::kWgmma          ? "wgmma"
                                         : bwd == Bwd::kWgmmaAtomics ? "wgmma atomics"
                                         : bwd == Bwd::kCudnn        ? "cuDNN"
                                                                     : "handwritten";
                INFO(name << " backward");
                d_dq.poison();
                d_dk.poison();
                d_dv.poison();
                d_dqg.poison();
                if (bwd == Bwd::kCudnn) {
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
                } else if (bwd == Bwd::kWgmma || bwd == Bwd::kWgmmaAtomics) {
                    const size_t budget = bwd == Bwd::kWgmma ? kAttentionDsBudget : 0;
                    const size_t bwsb = gated_attention_backward_wgmma_workspace_bytes(a, budget);
                    DeviceBuffer<char> bws(bwsb);
                    bws.poison();
                    auto run = [&](__nv_bfloat16* dk, size_t bytes) {
                        return gated_attention_backward_wgmma(
                            bf16_ptr(d_dq), dk, bf16_ptr(d_dv), bf16_ptr(d_dqg) + d, bf16_ptr(d_dy),
                            bf16_ptr(d_y), d_lse.get(), a, bws.get(), bytes, nullptr, budget);
                    };
                    REQUIRE(run(bf16_ptr(d_dk), bwsb) == cudaSuccess);
                    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                    // Run again: dK and dV the same bits; dQ too with its dS tiles through
                    // memory, within fp32 rounding of the sums where atomics add it.
                    const auto dk1 = d_dk.download(), dv1 = d_dv.download(), dq1 = d_dq.download();
                    REQUIRE(run(bf16_ptr(d_dk), bwsb) == cudaSuccess);
                    CHECK(d_dk.download() == dk1);
                    CHECK(d_dv.download() == dv1);
                    if (bwd == Bwd::kWgmma) {
                        CHECK(d_dq.download() == dq1);
                    } else {
                        CHECK(rel_err(to_float(d_dq.download()), to_float(dq1)) < 1e-3);
                    }
                    CHECK(run(bf16_ptr(d_dk), bwsb - 1) == cudaErrorInvalidValue);
                    // dk / dv are stored in 4-byte pairs and dq converted 4 at a time: a
                    // misaligned output is refused before any launch.
                    CHECK(run(bf16_ptr(d_dk) + 1, bwsb) == cudaErrorInvalidValue);
                } else {
                    const size_t bwsb = gated_attention_backward_workspace_bytes(a);
                    DeviceBuffer<char> bws(bwsb);
                    REQUIRE(gated_attention_backward(bf16_ptr(d_dq), bf16_ptr(d_dk), bf16_ptr(d_dv),
                                                     bf16_ptr(d_dqg) + d, bf16_ptr(d_dy),
                                                     bf16_ptr(d_o), d_lse.get(), a, bws.get(), bwsb,
                                                     nullptr) == cudaSuccess);
                }
                const std::vector<float> dgate = gate_half(to_float(d_dqg.download()), tokens, hq);
                CHECK(noted("wgmma->" + name + " bwd dgate rel", rel_err(dgate, gr.dgate_ref)) <
                      1e-2);
                CHECK(noted("wgmma->" + name + " bwd dq rel",
                            rel_err(to_float(d_dq.download()), gr.dq_ref)) < 2e-2);
                CHECK(noted("wgmma->" + name + " bwd dk rel",
                            rel_err(to_float(d_dk.download()), gr.dk_ref)) < 2e-2);
                CHECK(noted("wgmma->" + name + " bwd dv rel",
                            rel_err(to_float(d_dv.download()), gr.dv_ref)) < 2e-2);
                // Every backward gives the same worst rows on these inputs (dq 0.11: a small row
                // of bf16 inputs' rounding); a wrong or missing row is off by about 1.
                CHECK(noted("wgmma->" + name + " bwd dq worst row",
                            worst_row_err(to_float(d_dq.download()), gr.dq_ref)) < 0.25);
                CHECK(noted("wgmma->" + name + " bwd dk worst row",
                            worst_row_err(to_float(d_dk.download()), gr.dk_ref)) < 0.25);
                CHECK(noted("wgmma->" + name + " bwd dv worst row",
                            worst_row_err(to_float(d_dv.download()), gr.dv_ref)) < 0.25);
            }
        }
    }
}

// The work lists at scale: tens of thousands of documents (a warp per document lists them), and
// more 64-token tile levels than list_tiles_kernel's 1024 threads scan at once (the offsets carry
// from one chunk of levels to the next). A lost or doubled tile leaves poisoned rows or the
// wrong sums; the backward runs with its dS tiles through memory and with atomics.
TEST_CASE("wgmma attention lists past 1024 tile levels and 50k documents", "[kernels][cuda]") {
    if (!have_hopper_code()) return;
    std::mt19937 rng(321);
    std::vector<int32_t> lengths = {1500};  // 24 key tiles
    std::uniform_int_distribution<int32_t> len(50, 200);
    for (int i = 0; i < 100; ++i) lengths.push_back(len(rng));
    int64_t tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
    while (tokens < 70000) {  // 70000 / 64 > 1024 levels; one-token documents keep it cheap
        lengths.push_back(1);
        ++tokens;
    }
    std::shuffle(lengths.begin(), lengths.end(), rng);
    const auto cu = awkward_cu_seqlens(lengths);
    const AttentionCase p = attention_case(rng, cu, 1, 1);
    const size_t qn = p.o_ref.size(), kvn = p.k.f.size();
    AttentionDeviceCase dc(p, cu, 1500);
    auto& [d_q, d_k, d_v, d_qg, d_cu, d_y, d_o, d_lse, a] = dc;
    INFO("tokens = " << tokens << ", docs = " << lengths.size());
    const size_t wsb = gated_attention_forward_wgmma_workspace_bytes(a);
    DeviceBuffer<char> ws(wsb);
    ws.poison();
    REQUIRE(gated_attention_forward_wgmma(bf16_ptr(d_y), bf16_ptr(d_o), d_lse.get(), a, ws.get(),
                                          wsb, nullptr) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(noted("wgmma lists: o worst row", worst_row_err(to_float(d_o.download()), p.o_ref)) <
          0.05);
    CHECK(noted("wgmma lists: y worst row", worst_row_err(to_float(d_y.download()), p.y_ref)) <
          0.05);
    const AttentionGrads gr = attention_grads(rng, p, cu);
    DeviceBuffer<uint16_t> d_dy(gr.dy.bits), d_dq(qn), d_dk(kvn), d_dv(kvn), d_dqg(2 * qn);
    // The bound on dS tiles counts every document at the longest one's length: past the
    // default budget here, so the default runs dQ by atomics; a budget that holds the bound
    // sends the tiles through memory.
    const size_t bound = attention_ds_tile_bound(a.tokens, a.num_docs, 1500, 1);
    for (const size_t budget : {kAttentionDsBudget, bound}) {
        INFO("dS budget " << budget << " of a bound of " << bound);
        const size_t bwsb = gated_attention_backward_wgmma_workspace_bytes(a, budget);
        DeviceBuffer<char> bws(bwsb);
        bws.poison();
        d_dq.poison();
        d_dk.poison();
        d_dv.poison();
        REQUIRE(gated_attention_backward_wgmma(bf16_ptr(d_dq), bf16_ptr(d_dk), bf16_ptr(d_dv),
                                               bf16_ptr(d_dqg) + 256, bf16_ptr(d_dy), bf16_ptr(d_y),
                                               d_lse.get(), a, bws.get(), bwsb, nullptr,
                                               budget) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(noted("wgmma lists: dq worst row",
                    worst_row_err(to_float(d_dq.download()), gr.dq_ref)) < 0.25);
        CHECK(noted("wgmma lists: dk worst row",
                    worst_row_err(to_float(d_dk.download()), gr.dk_ref)) < 0.25);
        CHECK(noted("wgmma lists: dv worst row",
                    worst_row_err(to_float(d_dv.download()), gr.dv_ref)) < 0.25);
    }
}

// The gate's extremes (one value per token, every column): y is o * sigmoid(gate) to within its
// bf16 rounding wherever sigmoid is above 2^-62 (gate above about -43, and +inf), tiny but not 0
// below (the epilogue caps the exponent at 63: the gate's gradient, dy y (1 - sigmoid), never
// dies), and NaN where the gate is NaN. o is the kernel's own, so attention's rounding is not in
// the comparison.
TEST_CASE("wgmma attention forward keeps the gate's extremes", "[kernels][cuda]") {
    if (!have_hopper_code()) return;
    std::mt19937 rng(11);
    const std::vector<int32_t> cu = {0, 200};
    AttentionCase p = attention_case(rng, cu, 2, 1);
    const float extremes[] = {-INFINITY, -1e30f, -80.0f, -43.0f, -20.0f, -9.0f,    -4.0f,
                              -0.5f,     0.0f,   3.0f,   20.0f,  1e30f,  INFINITY, NAN};
    constexpr int64_t d = 256, n = sizeof(extremes) / sizeof(extremes[0]);
    for (int64_t t = 0; t < p.tokens; ++t) {
        for (int64_t h = 0; h < p.q_heads; ++h) {
            for (int64_t c = 0; c < d; ++c) {
                p.qg.bits[static_cast<size_t>((t * p.q_heads + h) * 2 * d + d + c)] =
                    float_to_bf16_bits(extremes[(t + h) % n]);
            }
        }
    }
    AttentionDeviceCase dc(p, cu, 200);
    auto& [d_q, d_k, d_v, d_qg, d_cu, d_y, d_o, d_lse, a] = dc;
    const size_t wsb = gated_attention_forward_wgmma_workspace_bytes(a);
    DeviceBuffer<char> ws(wsb);
    REQUIRE(gated_attention_forward_wgmma(bf16_ptr(d_y), bf16_ptr(d_o), d_lse.get(), a, ws.get(),
                                          wsb, nullptr) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const auto o = to_float(d_o.download()), y = to_float(d_y.download());
    int bad = 0, nonzero_o = 0;
    for (int64_t t = 0; t < p.tokens; ++t) {
        for (int64_t h = 0; h < p.q_heads; ++h) {
            const float g = bf16_bits_to_float(float_to_bf16_bits(extremes[(t + h) % n]));
            for (int64_t c = 0; c < d; ++c) {
                const size_t i = static_cast<size_t>((t * p.q_heads + h) * d + c);
                bool ok;
                if (std::isnan(g)) {
                    ok = std::isnan(y[i]);
                } else if (g > -43.5f) {
                    const double want = o[i] / (1.0 + std::exp(-static_cast<double>(g)));
                    ok = std::abs(y[i] - want) <= 4e-3 * std::abs(want);
                } else {  // capped: about 2^-63 |o|, never 0 where o is not
                    ok = std::isfinite(y[i]) && std::abs(y[i]) <= 0x1p-61 * std::abs(o[i]) &&
                         (o[i] == 0.0f || y[i] != 0.0f);
                    nonzero_o += o[i] != 0.0f;
                }
                if (!ok && ++bad <= 5) {
                    UNSCOPED_INFO("token " << t << " head " << h << " col " << c << ": gate " << g
                                           << ", o " << o[i] << ", y " << y[i]);
                }
            }
        }
    }
    CHECK(bad == 0);
    CHECK(nonzero_o > 1000);  // the capped rows were checked on real values
}

TEST_CASE("wgmma attention refuses, not traps, without the sm_90a code", "[kernels][cuda]") {
    if (!have_gpu()) return;
    if (loaded_code().arch >= kHopperCodeArch) {
        WARN("skipped: the sm_90a code is loaded (the portable build runs this case)");
        return;
    }
    std::mt19937 rng(7);
    const std::vector<int32_t> cu = {0, 64};
    const AttentionCase p = attention_case(rng, cu, 1, 1);
    AttentionDeviceCase dc(p, cu, 64);
    auto& [d_q, d_k, d_v, d_qg, d_cu, d_y, d_o, d_lse, a] = dc;
    const size_t wsb = gated_attention_forward_wgmma_workspace_bytes(a);
    DeviceBuffer<char> ws(wsb);
    CHECK(gated_attention_forward_wgmma(bf16_ptr(d_y), bf16_ptr(d_o), d_lse.get(), a, ws.get(), wsb,
                                        nullptr) == cudaErrorNoKernelImageForDevice);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);  // nothing launched, the context intact
}
#else
TEST_CASE("wgmma attention refuses, not traps, without the sm_90a code", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
TEST_CASE("wgmma gated attention forward matches the reference", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
TEST_CASE("wgmma attention forward keeps the gate's extremes", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
TEST_CASE("wgmma attention lists past 1024 tile levels and 50k documents", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
