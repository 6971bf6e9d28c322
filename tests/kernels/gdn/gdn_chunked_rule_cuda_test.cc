// Chunked gated delta rule CUDA kernels (gates and q/k L2 norm fused) against the fp64 per-token
// recurrence composed from the references (l2norm, gdn_gates, gated_delta_rule) on bf16 inputs
// ([cuda]; skipped with a printed reason where no GPU is present). Packed batches hold documents
// of 1, 2, 7, 63, 64, 65, 130 and 1000+ tokens, so documents start and end inside chunks and
// straddle chunk edges; value/key head ratios 1, 2 and 3.
#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/gdn/gdn_chunked_rule.h"
#include "kernels/gdn/gdn_gates.h"
#include "kernels/norm/l2norm.h"
#include "tests/kernels/common/cuda_test_util.h"
#include "tests/kernels/common/fp64_ref_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

constexpr int64_t kDim = 128;
constexpr double kNormEps = 1e-6;

struct Expected {
    std::vector<double> out, dq, dk, dv, da, db, dA_log, ddt_bias;
};

// The fp64 oracle: L2 norm and gates, the per-token recurrence, then back through all three.
Expected reference(const std::vector<double>& q, const std::vector<double>& k,
                   const std::vector<double>& v, const std::vector<double>& a,
                   const std::vector<double>& b, const std::vector<double>& A_log,
                   const std::vector<double>& dt_bias, const std::vector<double>& dout,
                   const std::vector<int32_t>& cu, int64_t k_heads, int64_t v_heads, double scale,
                   std::vector<double> dA_log0, std::vector<double> ddt_bias0) {
    const int64_t docs = static_cast<int64_t>(cu.size()) - 1;
    const int64_t tokens = cu.back();
    const size_t nk = static_cast<size_t>(tokens * k_heads * kDim);
    const size_t nv = static_cast<size_t>(tokens * v_heads * kDim);
    const size_t ng = static_cast<size_t>(tokens * v_heads);
    std::vector<double> qn(nk), kn(nk), rq(static_cast<size_t>(tokens * k_heads)), rk(rq.size());
    l2norm_forward_ref(qn.data(), rq.data(), q.data(), tokens * k_heads, kDim, kNormEps);
    l2norm_forward_ref(kn.data(), rk.data(), k.data(), tokens * k_heads, kDim, kNormEps);
    std::vector<double> beta(ng), g(ng);
    gdn_gates_forward_ref(beta.data(), g.data(), b.data(), a.data(), A_log.data(), dt_bias.data(),
                          tokens, v_heads);
    Expected e;
    e.out.resize(nv);
    gated_delta_rule_forward_ref(e.out.data(), qn.data(), kn.data(), v.data(), g.data(),
                                 beta.data(), cu.data(), docs, k_heads, v_heads, kDim, kDim, scale);
    std::vector<double> dqn(nk), dkn(nk), dg(ng), dbeta(ng);
    e.dv.resize(nv);
    gated_delta_rule_backward_ref(dqn.data(), dkn.data(), e.dv.data(), dg.data(), dbeta.data(),
                                  dout.data(), qn.data(), kn.data(), v.data(), g.data(),
                                  beta.data(), cu.data(), docs, k_heads, v_heads, kDim, kDim,
                                  scale);
    e.da.resize(ng);
    e.db.resize(ng);
    e.dA_log = std::move(dA_log0);
    e.ddt_bias = std::move(ddt_bias0);
    gdn_gates_backward_ref(e.db.data(), e.da.data(), e.dA_log.data(), e.ddt_bias.data(),
                           dbeta.data(), dg.data(), b.data(), a.data(), A_log.data(),
                           dt_bias.data(), tokens, v_heads);
    e.dq.resize(nk);
    e.dk.resize(nk);
    l2norm_backward_ref(e.dq.data(), dqn.data(), qn.data(), rq.data(), tokens * k_heads, kDim);
    l2norm_backward_ref(e.dk.data(), dkn.data(), kn.data(), rk.data(), tokens * k_heads, kDim);
    return e;
}

// q, k, v as column blocks of one (tokens, stride) matrix and the gradients written into one
// likewise, as the model's conv output and its gradient hold them: the same bits as the dense
// call's (out, dq, dk, dv, da, db given), and the spare columns untouched.
void check_strided_layout(GatedDeltaRuleArgs args, GatedDeltaRuleGrads grads,
                          const DeviceBuffer<uint16_t>& d_dout, const std::vector<uint16_t>& q,
                          const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
                          int64_t kw, int64_t vw, const std::vector<float>& out,
                          const std::vector<uint16_t>& dq, const std::vector<uint16_t>& dk,
                          const std::vector<uint16_t>& dv, const std::vector<uint16_t>& da,
                          const std::vector<uint16_t>& db) {
    const int64_t T = args.tokens, stride = 2 * kw + vw + 8;  // 8 spare columns
    const int64_t at[3] = {0, kw, 2 * kw}, width[3] = {kw, kw, vw};
    const std::vector<uint16_t> spare(static_cast<size_t>(T * stride), 0x7fc1);  // bf16 NaNs
    auto pack = [&](const std::vector<uint16_t>* parts[3]) {
        std::vector<uint16_t> m = spare;
        for (int p = 0; p < 3; ++p) {
            for (int64_t t = 0; t < T; ++t) {
                std::copy_n(parts[p]->begin() + t * width[p], width[p],
                            m.begin() + t * stride + at[p]);
            }
        }
        return m;
    };
    const std::vector<uint16_t>* in_parts[3] = {&q, &k, &v};
    const std::vector<uint16_t>* grad_parts[3] = {&dq, &dk, &dv};
    DeviceBuffer<uint16_t> qkv(pack(in_parts)), dqkv(spare), d_out(static_cast<size_t>(T * vw));
    args.q = bf16_ptr(qkv);
    args.k = bf16_ptr(qkv) + kw;
    args.v = bf16_ptr(qkv) + 2 * kw;
    args.qkv_stride = stride;
    grads.dq = bf16_ptr(dqkv);
    grads.dk = bf16_ptr(dqkv) + kw;
    grads.dv = bf16_ptr(dqkv) + 2 * kw;
    grads.dqkv_stride = stride;
    DeviceBuffer<uint16_t> d_da(da.size()), d_db(db.size());
    grads.da = bf16_ptr(d_da);
    grads.db = bf16_ptr(d_db);
    const size_t svb = gated_delta_rule_saved_bytes(T, args.v_heads);
    const size_t scb = gated_delta_rule_backward_scratch_bytes(T, args.v_heads);
    DeviceBuffer<char> saved(svb), scratch(scb);
    REQUIRE(gated_delta_rule_forward_saving(bf16_ptr(d_out), args, saved.get(), svb, nullptr) ==
            cudaSuccess);
    CHECK(to_float(d_out.download()) == out);
    REQUIRE(gated_delta_rule_backward_from_saved(grads, bf16_ptr(d_dout), args, saved.get(),
                                                 scratch.get(), scb, nullptr) == cudaSuccess);
    CHECK(dqkv.download() == pack(grad_parts));  // the spare columns still the NaN pattern
    CHECK(d_da.download() == da);
    CHECK(d_db.download() == db);
    args.qkv_stride = stride - 4;  // not a multiple of 8: refused
    CHECK(gated_delta_rule_forward_saving(bf16_ptr(d_out), args, saved.get(), svb, nullptr) ==
          cudaErrorInvalidValue);
}

TEST_CASE("chunked gated delta rule CUDA forward and backward match the fp64 recurrence",
          "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(63);
    struct Case {
        std::vector<int32_t> lengths;
        int64_t k_heads;
        std::vector<int64_t> ratios;
    };
    const Case cases[] = {
        // One document past 1000 tokens; documents starting on and inside chunk boundaries,
        // several in one chunk, and empty ones (the state resets at each start).
        {{1, 63, 64, 0, 65, 2, 1031, 7, 64, 130, 1, 0}, 2, {1, 2, 3}},
        {{1100}, 2, {1, 2, 3}},  // one document, many chunks
        // 27B's heads: the recurrences take 64 value columns per block (32 below 34 heads).
        {{70, 1, 57, 0, 72}, 16, {3}},
        // Chunk counts that exercise the recurrences' double buffers: odd (5: the reverse starts
        // in the other buffer), each buffer used three times and more (7), and a stream shorter
        // than one chunk (rows past its end read as zeros).
        {{300}, 16, {3}},
        {{130, 2, 260}, 16, {3}},
        {{40}, 16, {3}},
    };
    for (const auto& [lengths, k_heads, ratios] : cases) {
        for (int64_t ratio : ratios) {
            const int64_t v_heads = k_heads * ratio;
            INFO("docs = " << lengths.size() << ", k_heads = " << k_heads
                           << ", v_heads / k_heads = " << ratio);
            const auto cu = awkward_cu_seqlens(lengths);
            const int64_t docs = static_cast<int64_t>(lengths.size());
            const int64_t tokens = cu.back();
            const size_t nk = static_cast<size_t>(tokens * k_heads * kDim);
            const size_t nv = static_cast<size_t>(tokens * v_heads * kDim);
            const size_t ng = static_cast<size_t>(tokens * v_heads);
            const Bf16Data q = random_bf16(nk, rng), k = random_bf16(nk, rng),
                           v = random_bf16(nv, rng), a = random_bf16(ng, rng),
                           b = random_bf16(ng, rng, 2.0f), dout = random_bf16(nv, rng);
            // Decays from strong (g ~ -3) to weak (g ~ -0.005), so state carries across chunks.
            std::uniform_real_distribution<float> ulog(-4.0f, 1.0f);
            std::normal_distribution<float> ndt(-1.0f, 1.0f);
            std::vector<float> A_log(static_cast<size_t>(v_heads)), dt_bias(A_log.size());
            for (auto& x : A_log) x = ulog(rng);
            for (auto& x : dt_bias) x = ndt(rng);
            const std::vector<float> dA0 = random_f32(A_log.size(), rng);
            const std::vector<float> ddt0 = random_f32(A_log.size(), rng);
            const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
            const Expected e =
                reference(to_double(q.f), to_double(k.f), to_double(v.f), to_double(a.f),
                          to_double(b.f), to_double(A_log), to_double(dt_bias), to_double(dout.f),
                          cu, k_heads, v_heads, scale, to_double(dA0), to_double(ddt0));

            DeviceBuffer<int32_t> d_cu(cu);
            DeviceBuffer<uint16_t> d_q(q.bits), d_k(k.bits), d_v(v.bits), d_a(a.bits), d_b(b.bits),
                d_dout(dout.bits), d_out(nv), d_dq(nk), d_dk(nk), d_dv(nv), d_da(ng), d_db(ng);
            DeviceBuffer<float> d_A(A_log), d_dt(dt_bias), d_dA(dA0), d_ddt(ddt0);
            const size_t fwb = gated_delta_rule_forward_workspace_bytes(tokens, v_heads);
            const size_t bwb = gated_delta_rule_backward_workspace_bytes(tokens, v_heads);
            DeviceBuffer<char> ws(bwb > fwb ? bwb : fwb);
            GatedDeltaRuleArgs args;
            args.q = bf16_ptr(d_q);
            args.k = bf16_ptr(d_k);
            args.v = bf16_ptr(d_v);
            args.a = bf16_ptr(d_a);
            args.b = bf16_ptr(d_b);
            args.A_log = d_A.get();
            args.dt_bias = d_dt.get();
            args.cu_seqlens = d_cu.get();
            args.num_docs = docs;
            args.tokens = tokens;
            args.k_heads = k_heads;
            args.v_heads = v_heads;
            args.scale = static_cast<float>(scale);
            GatedDeltaRuleGrads grads;
            grads.dq = bf16_ptr(d_dq);
            grads.dk = bf16_ptr(d_dk);
            grads.dv = bf16_ptr(d_dv);
            grads.da = bf16_ptr(d_da);
            grads.db = bf16_ptr(d_db);
            grads.dA_log = d_dA.get();
            grads.ddt_bias = d_ddt.get();
            for (auto* buf : {&d_out, &d_dq, &d_dk, &d_dv, &d_da, &d_db}) buf->poison();
            ws.poison();
            REQUIRE(gated_delta_rule_forward(bf16_ptr(d_out), args, ws.get(), fwb, nullptr) ==
                    cudaSuccess);
            const auto out = to_float(d_out.download());
            ws.poison();
            REQUIRE(gated_delta_rule_backward(grads, bf16_ptr(d_dout), args, ws.get(), bwb,
                                              nullptr) == cudaSuccess);
            const auto dq = d_dq.download();
            CHECK(noted("gdn out rel", rel_err(out, to_single(e.out))) < 1e-2);
            CHECK(noted("gdn out max_scaled", max_scaled_err(out, to_single(e.out), 2e-2, 2e-2)) <=
                  1.0);
            CHECK(noted("gdn dq rel", rel_err(to_float(dq), to_single(e.dq))) < 2e-2);
            CHECK(noted("gdn dk rel", rel_err(to_float(d_dk.download()), to_single(e.dk))) < 2e-2);
            CHECK(noted("gdn dv rel", rel_err(to_float(d_dv.download()), to_single(e.dv))) < 2e-2);
            CHECK(noted("gdn da rel", rel_err(to_float(d_da.download()), to_single(e.da))) < 2e-2);
            CHECK(noted("gdn db rel", rel_err(to_float(d_db.download()), to_single(e.db))) < 2e-2);
            CHECK(noted("gdn dA_log rel", rel_err(d_dA.download(), to_single(e.dA_log))) < 2e-2);
            CHECK(noted("gdn ddt_bias rel", rel_err(d_ddt.download(), to_single(e.ddt_bias))) <
                  2e-2);
            // The backward is deterministic: a second run gives the same bits.
            d_dq.poison();
            REQUIRE(gated_delta_rule_backward(grads, bf16_ptr(d_dout), args, ws.get(), bwb,
                                              nullptr) == cudaSuccess);
            CHECK(d_dq.download() == dq);
            // Training's pair: the forward keeps its intermediates, the backward starts from
            // them (no replay) and gives the same bits everywhere.
            const auto dk = d_dk.download(), dv = d_dv.download(), da = d_da.download(),
                       db = d_db.download();
            const size_t svb = gated_delta_rule_saved_bytes(tokens, v_heads);
            const size_t scb = gated_delta_rule_backward_scratch_bytes(tokens, v_heads);
            CHECK(svb + scb == bwb);
            DeviceBuffer<char> saved(svb), scratch(scb);
            saved.poison();
            scratch.poison();
            for (auto* buf : {&d_out, &d_dq, &d_dk, &d_dv, &d_da, &d_db}) buf->poison();
            REQUIRE(gated_delta_rule_forward_saving(bf16_ptr(d_out), args, saved.get(), svb,
                                                    nullptr) == cudaSuccess);
            CHECK(to_float(d_out.download()) == out);
            REQUIRE(gated_delta_rule_backward_from_saved(grads, bf16_ptr(d_dout), args, saved.get(),
                                                         scratch.get(), scb,
                                                         nullptr) == cudaSuccess);
            CHECK(d_dq.download() == dq);
            CHECK(d_dk.download() == dk);
            CHECK(d_dv.download() == dv);
            CHECK(d_da.download() == da);
            CHECK(d_db.download() == db);
            check_strided_layout(args, grads, d_dout, q.bits, k.bits, v.bits, k_heads * kDim,
                                 v_heads * kDim, out, dq, dk, dv, da, db);
        }
    }
}
#endif

}  // namespace
}  // namespace deltatune
