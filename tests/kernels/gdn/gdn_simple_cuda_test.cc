// [cuda] The reference-grade GDN kernels (kernels/gdn/gdn_simple.cu) and the generic gated
// attention (kernels/attention/attention_generic.cu) against their fp32 CPU references, on awkward
// packings (one-token documents, lengths off every tile), random inputs and poisoned outputs.
#if DELTATUNE_HAVE_CUDA
#include <cmath>

#include "kernels/attention/attention_generic.h"
#include "kernels/gdn/causal_conv1d.h"
#include "kernels/gdn/gdn_chunked_rule.h"
#include "kernels/gdn/gdn_gates.h"
#include "kernels/gdn/gdn_simple.h"
#include "kernels/norm/gated_rmsnorm.h"
#include "kernels/norm/l2norm.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

using namespace cudatest;
using F = DeviceBuffer<float>;
using B = DeviceBuffer<uint16_t>;

const std::vector<std::vector<int32_t>> kPackings = {{1}, {37}, {1, 5, 1, 40, 17, 1}, {70, 3, 1}};

TEST_CASE("gdn_simple conv, l2norm, gates, gated rmsnorm match the references", "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(7);
    for (const auto& lens : kPackings) {
        const auto cu = awkward_cu_seqlens(lens);
        const int64_t T = cu.back(), D = static_cast<int64_t>(lens.size()), C = 24, K = 4;
        DeviceBuffer<int32_t> dcu(cu);
        // conv + silu
        Bf16Data x = random_bf16(T * C, rng);
        std::vector<float> w = random_f32(C * K, rng, 0.5f), dout = random_f32(T * C, rng);
        std::vector<float> ref(T * C), dx_ref(T * C), dw_ref(C * K, 0.25f);
        causal_conv1d_forward_ref(ref.data(), x.f.data(), w.data(), cu.data(), D, C, K);
        causal_conv1d_backward_ref(dx_ref.data(), dw_ref.data(), dout.data(), x.f.data(), w.data(),
                                   cu.data(), D, C, K);
        B dx_in(x.bits), ddx(T * C);
        F dw(w), dout_d(dout), out(T * C), dwg(std::vector<float>(C * K, 0.25f));
        out.poison();
        ddx.poison();
        REQUIRE(gdn_conv_silu_forward_simple(out.get(), bf16_ptr(dx_in), dw.get(), dcu.get(), D, T,
                                             C, K, nullptr) == cudaSuccess);
        CHECK(noted("conv fwd rel", rel_err(out.download(), ref)) < 1e-5);
        REQUIRE(gdn_conv_silu_backward_simple(bf16_ptr(ddx), dwg.get(), dout_d.get(),
                                              bf16_ptr(dx_in), dw.get(), dcu.get(), D, T, C, K,
                                              nullptr) == cudaSuccess);
        CHECK(noted("conv dx rel (bf16 out)", rel_err(to_float(ddx.download()), dx_ref)) < 1e-2);
        CHECK(noted("conv dw rel", rel_err(dwg.download(), dw_ref)) < 1e-5);

        // l2norm on strided heads: 2 heads of 8 inside rows of C = 24 at offset 8
        const int64_t Hk = 2, dk = 8;
        std::vector<float> src = random_f32(T * C, rng), packed(T * Hk * dk);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < Hk * dk; ++i) packed[t * Hk * dk + i] = src[t * C + 8 + i];
        std::vector<float> y_ref(T * Hk * dk), rn_ref(T * Hk), dy = random_f32(T * Hk * dk, rng),
                                                               dxl_ref(T * Hk * dk);
        l2norm_forward_ref(y_ref.data(), rn_ref.data(), packed.data(), T * Hk, dk, 1e-6f);
        l2norm_backward_ref(dxl_ref.data(), dy.data(), y_ref.data(), rn_ref.data(), T * Hk, dk);
        F s(src), y(T * Hk * dk), rn(T * Hk), dyd(dy), dxl(T * C);
        y.poison();
        dxl.poison();
        REQUIRE(gdn_l2norm_forward_simple(y.get(), rn.get(), s.get() + 8, C, T, Hk, dk, 1e-6f,
                                          nullptr) == cudaSuccess);
        CHECK(noted("l2norm fwd rel", rel_err(y.download(), y_ref)) < 1e-5);
        REQUIRE(gdn_l2norm_backward_simple(dxl.get() + 8, C, dyd.get(), y.get(), rn.get(), T, Hk,
                                           dk, nullptr) == cudaSuccess);
        const auto dxl_h = dxl.download();
        std::vector<float> dxl_got(T * Hk * dk);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < Hk * dk; ++i) dxl_got[t * Hk * dk + i] = dxl_h[t * C + 8 + i];
        CHECK(noted("l2norm dx rel", rel_err(dxl_got, dxl_ref)) < 1e-5);

        // gates (one a value above softplus's threshold)
        const int64_t Hv = 4;
        Bf16Data b = random_bf16(T * Hv, rng, 2.0f), a = random_bf16(T * Hv, rng, 2.0f);
        a.bits[0] = float_to_bf16_bits(24.0f);
        a.f[0] = 24.0f;
        std::vector<float> A_log = random_f32(Hv, rng), dt = random_f32(Hv, rng);
        std::vector<float> beta_ref(T * Hv), g_ref(T * Hv),
            dbeta = random_f32(T * Hv, rng), dg = random_f32(T * Hv, rng), db_ref(T * Hv),
            da_ref(T * Hv), dA_ref(Hv, 0.5f), ddt_ref(Hv, 0.5f);
        gdn_gates_forward_ref(beta_ref.data(), g_ref.data(), b.f.data(), a.f.data(), A_log.data(),
                              dt.data(), T, Hv);
        gdn_gates_backward_ref(db_ref.data(), da_ref.data(), dA_ref.data(), ddt_ref.data(),
                               dbeta.data(), dg.data(), b.f.data(), a.f.data(), A_log.data(),
                               dt.data(), T, Hv);
        B bd(b.bits), ad(a.bits), dbd(T * Hv), dad(T * Hv);
        F Ad(A_log), dtd(dt), betad(T * Hv), gd(T * Hv), dbetad(dbeta), dgd(dg);
        F dAd(std::vector<float>(Hv, 0.5f)), ddtd(std::vector<float>(Hv, 0.5f));
        betad.poison();
        gd.poison();
        REQUIRE(gdn_gates_forward_simple(betad.get(), gd.get(), bf16_ptr(bd), bf16_ptr(ad),
                                         Ad.get(), dtd.get(), T, Hv, nullptr) == cudaSuccess);
        CHECK(noted("gates beta rel", rel_err(betad.download(), beta_ref)) < 1e-5);
        CHECK(noted("gates g rel", rel_err(gd.download(), g_ref)) < 1e-5);
        REQUIRE(gdn_gates_backward_simple(bf16_ptr(dbd), bf16_ptr(dad), dAd.get(), ddtd.get(),
                                          dbetad.get(), dgd.get(), bf16_ptr(bd), bf16_ptr(ad),
                                          Ad.get(), dtd.get(), T, Hv, nullptr) == cudaSuccess);
        CHECK(noted("gates db rel (bf16)", rel_err(to_float(dbd.download()), db_ref)) < 1e-2);
        CHECK(noted("gates da rel (bf16)", rel_err(to_float(dad.download()), da_ref)) < 1e-2);
        CHECK(noted("gates dA_log rel", rel_err(dAd.download(), dA_ref)) < 1e-5);
        CHECK(noted("gates ddt_bias rel", rel_err(ddtd.download(), ddt_ref)) < 1e-5);

        // gated rmsnorm: rows T * Hv of 12
        const int64_t rows = T * Hv, cols = 12;
        std::vector<float> xo = random_f32(rows * cols, rng), wn = random_f32(cols, rng);
        Bf16Data z = random_bf16(rows * cols, rng);
        Bf16Data dyn = random_bf16(rows * cols, rng);
        std::vector<float> on_ref(rows * cols), rs_ref(rows), dxn_ref(rows * cols),
            dzn_ref(rows * cols), dwn_ref(cols, 0.1f);
        gated_rmsnorm_forward_ref(on_ref.data(), rs_ref.data(), xo.data(), z.f.data(), wn.data(),
                                  rows, cols, 1e-6f);
        gated_rmsnorm_backward_ref(dxn_ref.data(), dzn_ref.data(), dwn_ref.data(), dyn.f.data(),
                                   xo.data(), z.f.data(), wn.data(), rs_ref.data(), rows, cols);
        F xd(xo), wd(wn), rsd(rows), dxnd(rows * cols), dwnd(std::vector<float>(cols, 0.1f));
        B zd(z.bits), ond(rows * cols), dynd(dyn.bits), dznd(rows * cols);
        ond.poison();
        dxnd.poison();
        dznd.poison();
        REQUIRE(gdn_gated_rmsnorm_forward_simple(bf16_ptr(ond), rsd.get(), xd.get(), bf16_ptr(zd),
                                                 wd.get(), rows, cols, 1e-6f,
                                                 nullptr) == cudaSuccess);
        CHECK(noted("gated rmsnorm fwd rel (bf16)", rel_err(to_float(ond.download()), on_ref)) <
              1e-2);
        REQUIRE(gdn_gated_rmsnorm_backward_simple(dxnd.get(), bf16_ptr(dznd), dwnd.get(),
                                                  bf16_ptr(dynd), xd.get(), bf16_ptr(zd), wd.get(),
                                                  rsd.get(), rows, cols, nullptr) == cudaSuccess);
        CHECK(noted("gated rmsnorm dx rel", rel_err(dxnd.download(), dxn_ref)) < 1e-5);
        CHECK(noted("gated rmsnorm dz rel (bf16)", rel_err(to_float(dznd.download()), dzn_ref)) <
              1e-2);
        CHECK(noted("gated rmsnorm dw rel", rel_err(dwnd.download(), dwn_ref)) < 1e-5);
    }
}

TEST_CASE("gdn_simple delta rule matches the reference, grouped value heads", "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(11);
    struct Shape {
        int64_t Hk, Hv, dk, dv;
    };
    for (const Shape sh : {Shape{2, 4, 16, 16}, Shape{2, 6, 12, 20}, Shape{1, 2, 128, 128}}) {
        for (const auto& lens : kPackings) {
            const auto cu = awkward_cu_seqlens(lens);
            const int64_t T = cu.back(), D = static_cast<int64_t>(lens.size());
            const int64_t vs = sh.Hv * sh.dv + 8;  // v read from a wider row, as in the model
            std::vector<float> q(T * sh.Hk * sh.dk), k(T * sh.Hk * sh.dk), rn(T * sh.Hk);
            l2norm_forward_ref(q.data(), rn.data(), random_f32(q.size(), rng).data(), T * sh.Hk,
                               sh.dk, 1e-6f);
            l2norm_forward_ref(k.data(), rn.data(), random_f32(k.size(), rng).data(), T * sh.Hk,
                               sh.dk, 1e-6f);
            std::vector<float> vrow = random_f32(T * vs, rng), v(T * sh.Hv * sh.dv);
            for (int64_t t = 0; t < T; ++t)
                for (int64_t i = 0; i < sh.Hv * sh.dv; ++i)
                    v[t * sh.Hv * sh.dv + i] = vrow[t * vs + i];
            std::vector<float> g(T * sh.Hv), beta(T * sh.Hv);
            std::uniform_real_distribution<float> u(0.0f, 1.0f);
            for (auto& x : g) x = -2.0f * u(rng);
            for (auto& x : beta) x = u(rng);
            const float scale = 1.0f / std::sqrt(static_cast<float>(sh.dk));
            std::vector<float> o_ref(T * sh.Hv * sh.dv), dout = random_f32(o_ref.size(), rng);
            gated_delta_rule_forward_ref(o_ref.data(), q.data(), k.data(), v.data(), g.data(),
                                         beta.data(), cu.data(), D, sh.Hk, sh.Hv, sh.dk, sh.dv,
                                         scale);
            std::vector<float> dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size()),
                dg_ref(g.size()), db_ref(beta.size());
            gated_delta_rule_backward_ref(dq_ref.data(), dk_ref.data(), dv_ref.data(),
                                          dg_ref.data(), db_ref.data(), dout.data(), q.data(),
                                          k.data(), v.data(), g.data(), beta.data(), cu.data(), D,
                                          sh.Hk, sh.Hv, sh.dk, sh.dv, scale);
            DeviceBuffer<int32_t> dcu(cu);
            F qd(q), kd(k), vd(vrow), gd(g), bd(beta), od(o_ref.size()), doutd(dout);
            F dqd(q.size()), dkd(k.size()), dvd(T * vs), dgd(g.size()), dbd(beta.size());
            GdnRuleArgs a;
            a.q = qd.get(), a.k = kd.get(), a.v = vd.get(), a.v_token_stride = vs;
            a.g = gd.get(), a.beta = bd.get(), a.cu_seqlens = dcu.get(), a.num_docs = D;
            a.tokens = T, a.k_heads = sh.Hk, a.v_heads = sh.Hv, a.dk = sh.dk, a.dv = sh.dv;
            a.scale = scale;
            REQUIRE(gdn_rule_simple_supported(a));
            F wf(gdn_rule_forward_simple_workspace_bytes(a) / 4 + 1);
            F wb(gdn_rule_backward_simple_workspace_bytes(a) / 4 + 1);
            for (F* p : {&od, &dqd, &dkd, &dvd, &dgd, &dbd}) p->poison();
            REQUIRE(gdn_rule_forward_simple(od.get(), a, wf.get(), wf.size() * 4, nullptr) ==
                    cudaSuccess);
            CHECK(noted("delta rule out rel", rel_err(od.download(), o_ref)) < 1e-4);
            REQUIRE(gdn_rule_backward_simple(dqd.get(), dkd.get(), dvd.get(), dgd.get(), dbd.get(),
                                             doutd.get(), a, wb.get(), wb.size() * 4,
                                             nullptr) == cudaSuccess);
            const auto dvh = dvd.download();
            std::vector<float> dv_got(v.size());
            for (int64_t t = 0; t < T; ++t)
                for (int64_t i = 0; i < sh.Hv * sh.dv; ++i)
                    dv_got[t * sh.Hv * sh.dv + i] = dvh[t * vs + i];
            CHECK(noted("delta rule dq rel", rel_err(dqd.download(), dq_ref)) < 1e-4);
            CHECK(noted("delta rule dk rel", rel_err(dkd.download(), dk_ref)) < 1e-4);
            CHECK(noted("delta rule dv rel", rel_err(dv_got, dv_ref)) < 1e-4);
            CHECK(noted("delta rule dg rel", rel_err(dgd.download(), dg_ref)) < 1e-4);
            CHECK(noted("delta rule dbeta rel", rel_err(dbd.download(), db_ref)) < 1e-4);
        }
    }
}

TEST_CASE("generic gated attention matches the reference for small head dims", "[cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(5);
    struct Shape {
        int64_t Hq, Hkv, D;
    };
    for (const Shape sh : {Shape{4, 2, 32}, Shape{6, 2, 24}, Shape{2, 2, 16}, Shape{2, 1, 256}}) {
        for (const auto& lens : {std::vector<int32_t>{1, 130, 2, 1, 9}, std::vector<int32_t>{3}}) {
            const auto cu = awkward_cu_seqlens(lens);
            const int64_t T = cu.back(), Dn = static_cast<int64_t>(lens.size()), D = sh.D;
            Bf16Data q = random_bf16(T * sh.Hq * D, rng), k = random_bf16(T * sh.Hkv * D, rng);
            Bf16Data v = random_bf16(T * sh.Hkv * D, rng), gate = random_bf16(T * sh.Hq * D, rng);
            Bf16Data dy = random_bf16(T * sh.Hq * D, rng);
            const float scale = 1.0f / std::sqrt(static_cast<float>(D));
            const int64_t n = T * sh.Hq * D;
            std::vector<float> o(n), lse(T * sh.Hq), y(n), d_o(n), dgate(n), dq(n),
                dk(T * sh.Hkv * D), dv(T * sh.Hkv * D);
            attention_forward_ref(o.data(), lse.data(), q.f.data(), k.f.data(), v.f.data(),
                                  cu.data(), Dn, sh.Hq, sh.Hkv, D, scale);
            output_gate_forward_ref(y.data(), o.data(), gate.f.data(), n);
            output_gate_backward_ref(d_o.data(), dgate.data(), dy.f.data(), o.data(), gate.f.data(),
                                     n);
            attention_backward_ref(dq.data(), dk.data(), dv.data(), d_o.data(), q.f.data(),
                                   k.f.data(), v.f.data(), o.data(), lse.data(), cu.data(), Dn,
                                   sh.Hq, sh.Hkv, D, scale);
            DeviceBuffer<int32_t> dcu(cu);
            B qd(q.bits), kd(k.bits), vd(v.bits), gd(gate.bits), dyd(dy.bits);
            B yd(n), od(n), dqd(n), dkd(T * sh.Hkv * D), dvd(T * sh.Hkv * D), dgd(n);
            F lsed(T * sh.Hq);
            GatedAttentionArgs a;
            a.q = bf16_ptr(qd), a.k = bf16_ptr(kd), a.v = bf16_ptr(vd), a.gate = bf16_ptr(gd);
            a.gate_token_stride = sh.Hq * D, a.gate_head_stride = D, a.cu_seqlens = dcu.get();
            a.num_docs = Dn, a.tokens = T, a.q_heads = sh.Hq, a.kv_heads = sh.Hkv, a.head_dim = D;
            a.scale = scale;
            for (B* p : {&yd, &od, &dqd, &dkd, &dvd, &dgd}) p->poison();
            REQUIRE(gated_attention_forward_generic(bf16_ptr(yd), bf16_ptr(od), lsed.get(), a,
                                                    nullptr) == cudaSuccess);
            CHECK(noted("generic attention y rel", rel_err(to_float(yd.download()), y)) < 1e-2);
            CHECK(noted("generic attention lse rel", rel_err(lsed.download(), lse)) < 1e-4);
            F ws(gated_attention_backward_generic_workspace_bytes(a) / 4 + 1);
            REQUIRE(gated_attention_backward_generic(bf16_ptr(dqd), bf16_ptr(dkd), bf16_ptr(dvd),
                                                     bf16_ptr(dgd), bf16_ptr(dyd), bf16_ptr(od),
                                                     lsed.get(), a, ws.get(), ws.size() * 4,
                                                     nullptr) == cudaSuccess);
            CHECK(noted("generic attention dq rel", rel_err(to_float(dqd.download()), dq)) < 2e-2);
            CHECK(noted("generic attention dk rel", rel_err(to_float(dkd.download()), dk)) < 2e-2);
            CHECK(noted("generic attention dv rel", rel_err(to_float(dvd.download()), dv)) < 2e-2);
            CHECK(noted("generic attention dgate rel", rel_err(to_float(dgd.download()), dgate)) <
                  2e-2);
        }
    }
}

}  // namespace
}  // namespace deltatune
#endif
