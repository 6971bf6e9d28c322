// Qwen35GpuModel: parameter upload, the layer stack with the residual adds fused into the RMSNorm
// kernels, the fused linear cross-entropy head, backward in reverse layer order with optional
// per-layer recompute, gradient export and AdamW. Layer l computes
//   x_l = mid_{l-1} + mlp_{l-1} (fused with input norm),  mid_l = x_l + block(norm(x_l)) (fused
//   with post norm),  mlp_l = mlp(norm(mid_l));
// backward walks the same fused kernels: their ds is the gradient of both summands.
#include "runtime/model/qwen35_gpu_model.h"

#include "absl/strings/str_cat.h"

namespace deltatune {

absl::StatusOr<Recompute> parse_recompute(const std::string& name) {
    if (name == "none") return Recompute::kNone;
    if (name == "layer") return Recompute::kLayer;
    return absl::InvalidArgumentError(
        absl::StrCat("recompute policy: expected none or layer, got '", name, "'"));
}

const char* recompute_name(Recompute r) {
    return r == Recompute::kNone ? "none" : "layer";
}

}  // namespace deltatune

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include <map>

#include "kernels/adamw.h"
#include "kernels/cast.h"
#include "kernels/embedding.h"
#include "kernels/fused_linear_cross_entropy.h"
#include "kernels/grad_norm.h"
#include "kernels/init_fill.h"
#include "kernels/rmsnorm.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/model/gpu_blocks.h"
#include "runtime/model/qwen35_params.h"

namespace deltatune {

namespace {

constexpr int64_t kAlign = 128;  // elements: 256-byte aligned bf16 and 512-byte aligned fp32

struct LayerActs {
    DeviceMemory x, rstd1, a;    // layer input (residual stream) (T, H) bf16; (T) fp32; normed
    DeviceMemory mid, rstd2, m;  // after the block's residual add; (T) fp32; post-normed
    DeviceMemory mlp_out;        // (T, H) bf16, consumed by the next layer's fused norm
    GpuMlpActs mlp;
    GpuAttentionActs attn;
    GpuGdnActs gdn;
};

}  // namespace

struct Qwen35GpuModel::Impl {
    DeviceContext& dev;
    Qwen35Config c;
    Recompute recompute;
    std::vector<int64_t> offset, numel;  // per parameter, in elements of the flat buffers
    int64_t total = 0;
    DeviceMemory master, half, grad;  // fp32, bf16, fp32 flat
    GpuParam embed, final_norm, lm_head;
    std::vector<GpuLayer> layers;
    // The pending batch and what backward needs.
    DeviceMemory batch_ints;  // ids (T) | targets (T) | positions (T) | cu_seqlens (D + 1)
    GpuBatch batch;
    const int32_t* ids = nullptr;
    std::vector<LayerActs> acts;
    DeviceMemory xf, rstdf, dhf;
    bool pending = false;
    // adamw_step's persistent state: moments (m | v, fp32) and the planned tensor list.
    DeviceMemory moments, adamw_tensors;
    int64_t adamw_chunks = 0;

    Impl(DeviceContext& d, const Qwen35Config& cfg, Recompute r) : dev(d), c(cfg), recompute(r) {}
    cudaStream_t s() const { return dev.compute_stream(); }
    GpuCtx ctx() const { return GpuCtx{dev, c, batch}; }

    absl::Status layer_forward(int64_t l, const bf16* resid, const bf16* delta);
    absl::Status layer_backward(int64_t l, DeviceMemory& g);
};

absl::Status Qwen35GpuModel::Impl::layer_forward(int64_t l, const bf16* resid, const bf16* delta) {
    const int64_t T = batch.tokens, H = c.hidden_size;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const size_t th = sizeof(bf16) * static_cast<size_t>(T * H), t4 = sizeof(float) * T;
    LayerActs& A = acts[static_cast<size_t>(l)];
    const GpuLayer& w = layers[static_cast<size_t>(l)];
    if (!A.x.get()) {
        DT_ASSIGN_OR_RETURN(A.x, dev.allocate(th));
    }
    DT_ASSIGN_OR_RETURN(A.rstd1, dev.allocate(t4));
    DT_ASSIGN_OR_RETURN(A.a, dev.allocate(th));
    if (delta) {
        DT_CUDA_RETURN_IF_ERROR(rmsnorm_residual_forward(A.a.as<bf16>(), A.x.as<bf16>(),
                                                         A.rstd1.as<float>(), delta, resid,
                                                         w.input_norm.w, T, H, eps, s()));
    } else {
        if (resid != A.x.as<bf16>())
            DT_CUDA_RETURN_IF_ERROR(
                cudaMemcpyAsync(A.x.get(), resid, th, cudaMemcpyDeviceToDevice, s()));
        DT_CUDA_RETURN_IF_ERROR(rmsnorm_residual_forward(A.a.as<bf16>(), nullptr,
                                                         A.rstd1.as<float>(), A.x.as<bf16>(),
                                                         nullptr, w.input_norm.w, T, H, eps, s()));
    }
    DT_ASSIGN_OR_RETURN(DeviceMemory block_out, dev.allocate(th));
    if (w.type == LayerType::kLinearAttention) {
        DT_RETURN_IF_ERROR(gpu_gdn_forward(ctx(), w, A.a.as<bf16>(), block_out.as<bf16>(), A.gdn));
    } else {
        DT_RETURN_IF_ERROR(
            gpu_attention_forward(ctx(), w, A.a.as<bf16>(), block_out.as<bf16>(), A.attn));
    }
    DT_ASSIGN_OR_RETURN(A.mid, dev.allocate(th));
    DT_ASSIGN_OR_RETURN(A.rstd2, dev.allocate(t4));
    DT_ASSIGN_OR_RETURN(A.m, dev.allocate(th));
    DT_CUDA_RETURN_IF_ERROR(rmsnorm_residual_forward(
        A.m.as<bf16>(), A.mid.as<bf16>(), A.rstd2.as<float>(), block_out.as<bf16>(), A.x.as<bf16>(),
        w.post_norm.w, T, H, eps, s()));
    DT_ASSIGN_OR_RETURN(A.mlp_out, dev.allocate(th));
    return gpu_mlp_forward(ctx(), w, A.m.as<bf16>(), A.mlp_out.as<bf16>(), A.mlp);
}

// g: on entry d(x_{l+1}) (the gradient of mid_l and mlp_l), on return d(x_l).
absl::Status Qwen35GpuModel::Impl::layer_backward(int64_t l, DeviceMemory& g) {
    const int64_t T = batch.tokens, H = c.hidden_size;
    const size_t th = sizeof(bf16) * static_cast<size_t>(T * H);
    LayerActs& A = acts[static_cast<size_t>(l)];
    const GpuLayer& w = layers[static_cast<size_t>(l)];
    if (recompute == Recompute::kLayer) {
        DT_RETURN_IF_ERROR(layer_forward(l, A.x.as<bf16>(), nullptr));
    }
    A.mlp_out.reset();
    const size_t ws = rmsnorm_backward_workspace_bytes(T, H);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, dev.allocate(ws));
    DT_ASSIGN_OR_RETURN(DeviceMemory dm, dev.allocate(th));
    DT_RETURN_IF_ERROR(
        gpu_mlp_backward(ctx(), w, A.m.as<bf16>(), g.as<bf16>(), dm.as<bf16>(), A.mlp));
    DT_ASSIGN_OR_RETURN(DeviceMemory dmid, dev.allocate(th));
    DT_CUDA_RETURN_IF_ERROR(rmsnorm_residual_backward(
        dmid.as<bf16>(), w.post_norm.grad, dm.as<bf16>(), g.as<bf16>(), A.mid.as<bf16>(),
        w.post_norm.w, A.rstd2.as<float>(), T, H, work.get(), ws, s()));
    DT_ASSIGN_OR_RETURN(DeviceMemory dA, dev.allocate(th));
    if (w.type == LayerType::kLinearAttention) {
        DT_RETURN_IF_ERROR(
            gpu_gdn_backward(ctx(), w, A.a.as<bf16>(), dmid.as<bf16>(), dA.as<bf16>(), A.gdn));
    } else {
        DT_RETURN_IF_ERROR(gpu_attention_backward(ctx(), w, A.a.as<bf16>(), dmid.as<bf16>(),
                                                  dA.as<bf16>(), A.attn));
    }
    DT_CUDA_RETURN_IF_ERROR(rmsnorm_residual_backward(
        g.as<bf16>(), w.input_norm.grad, dA.as<bf16>(), dmid.as<bf16>(), A.x.as<bf16>(),
        w.input_norm.w, A.rstd1.as<float>(), T, H, work.get(), ws, s()));
    A = LayerActs{};
    return absl::OkStatus();
}

namespace {

GpuParam param_at(const Qwen35GpuModel::Impl& m, int64_t i) {
    const int64_t o = m.offset[static_cast<size_t>(i)];
    return GpuParam{m.half.as<bf16>() + o, m.master.as<float>() + o, m.grad.as<float>() + o};
}

}  // namespace

Qwen35GpuModel::Qwen35GpuModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Qwen35GpuModel::~Qwen35GpuModel() {
    if (impl_) cudaStreamSynchronize(impl_->s());
}

namespace {

// The masters: uploaded from `params` when `upload`, otherwise left for the caller to fill.
absl::StatusOr<std::unique_ptr<Qwen35GpuModel::Impl>> build_impl(DeviceContext& ctx,
                                                                 const Qwen35Config& config,
                                                                 ParamSet& params,
                                                                 Recompute recompute, bool upload) {
    if (ctx.device().is_cpu() || !ctx.gemm()) {
        return absl::FailedPreconditionError("Qwen35GpuModel needs a CUDA device context");
    }
    auto m = std::make_unique<Qwen35GpuModel::Impl>(ctx, config, recompute);
    std::map<const void*, int64_t> index;
    for (const auto& p : params.all()) {
        index[p.value.data<float>()] = static_cast<int64_t>(m->offset.size());
        m->offset.push_back(m->total);
        m->numel.push_back(p.value.numel());
        m->total += (p.value.numel() + kAlign - 1) / kAlign * kAlign;
    }
    const size_t n = static_cast<size_t>(m->total);
    DT_ASSIGN_OR_RETURN(m->master, ctx.allocate(n * sizeof(float)));
    DT_ASSIGN_OR_RETURN(m->half, ctx.allocate(n * sizeof(bf16)));
    DT_ASSIGN_OR_RETURN(m->grad, ctx.allocate(n * sizeof(float)));
    const cudaStream_t s = ctx.compute_stream();
    DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m->master.get(), 0, n * sizeof(float), s));
    for (size_t i = 0; upload && i < params.all().size(); ++i) {
        const Tensor& t = params.all()[i].value;
        DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m->master.as<float>() + m->offset[i],
                                                t.data<float>(), sizeof(float) * t.numel(),
                                                cudaMemcpyHostToDevice, s));
    }
    if (upload) {
        DT_CUDA_RETURN_IF_ERROR(
            cast_f32_to_bf16(m->half.as<bf16>(), m->master.as<float>(), m->total, s));
        DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));  // the host values may go away
    }

    ModelView v = model_view(config, params);
    auto at = [&](const Tensor& t) -> GpuParam {
        if (!t.defined()) return GpuParam{};
        return param_at(*m, index.at(t.data<float>()));
    };
    m->embed = at(v.embed);
    m->final_norm = at(v.final_norm);
    m->lm_head = at(v.lm_head);
    for (const LayerView& lv : v.layers) {
        GpuLayer g;
        g.type = lv.type;
        g.input_norm = at(lv.input_norm), g.post_norm = at(lv.post_norm);
        g.mlp_gate = at(lv.mlp_gate), g.mlp_up = at(lv.mlp_up), g.mlp_down = at(lv.mlp_down);
        g.in_proj_qkv = at(lv.in_proj_qkv), g.in_proj_z = at(lv.in_proj_z);
        g.in_proj_b = at(lv.in_proj_b), g.in_proj_a = at(lv.in_proj_a);
        g.conv_w = at(lv.conv_w), g.A_log = at(lv.A_log), g.dt_bias = at(lv.dt_bias);
        g.gdn_norm = at(lv.gdn_norm), g.out_proj = at(lv.out_proj);
        g.q_proj = at(lv.q_proj), g.k_proj = at(lv.k_proj), g.v_proj = at(lv.v_proj);
        g.o_proj = at(lv.o_proj), g.q_norm = at(lv.q_norm), g.k_norm = at(lv.k_norm);
        m->layers.push_back(g);
    }
    return m;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> Qwen35GpuModel::create(DeviceContext& ctx,
                                                                       const Qwen35Config& config,
                                                                       ParamSet& params,
                                                                       Recompute recompute) {
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Impl> m,
                        build_impl(ctx, config, params, recompute, /*upload=*/true));
    std::unique_ptr<Qwen35GpuModel> model(new Qwen35GpuModel(std::move(m)));
    DT_RETURN_IF_ERROR(model->zero_grads());
    return model;
}

absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> Qwen35GpuModel::create_random(
    DeviceContext& ctx, const Qwen35Config& config, Recompute recompute, uint64_t seed) {
    // Host tensors for names, shapes and distinct addresses only: their pages are never written.
    ParamSet layout = make_qwen35_params(config, config.tie_word_embeddings, /*zero_fill=*/false);
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Impl> m,
                        build_impl(ctx, config, layout, recompute, /*upload=*/false));
    const cudaStream_t s = m->s();
    const float std_dev = static_cast<float>(config.initializer_range);
    for (size_t i = 0; i < layout.all().size(); ++i) {
        // init_qwen35_params' rules by name.
        const std::string& name = layout.all()[i].name;
        InitFill kind = InitFill::kNormal;
        float a = std_dev, b = 0;
        if (ends_with(name, "linear_attn.A_log")) {
            kind = InitFill::kLogUniform, a = 0.01f, b = 16.0f;
        } else if (ends_with(name, "linear_attn.dt_bias") ||
                   ends_with(name, "linear_attn.norm.weight")) {
            kind = InitFill::kConstant, a = 1.0f;
        } else if (ends_with(name, "norm.weight") || ends_with(name, "layernorm.weight")) {
            kind = InitFill::kConstant, a = 0.0f;
        }
        DT_CUDA_RETURN_IF_ERROR(init_fill_f32(m->master.as<float>() + m->offset[i], m->numel[i],
                                              kind, a, b, seed, i, s));
    }
    DT_CUDA_RETURN_IF_ERROR(
        cast_f32_to_bf16(m->half.as<bf16>(), m->master.as<float>(), m->total, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    std::unique_ptr<Qwen35GpuModel> model(new Qwen35GpuModel(std::move(m)));
    DT_RETURN_IF_ERROR(model->zero_grads());
    return model;
}

absl::Status Qwen35GpuModel::zero_grads() {
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(impl_->grad.get(), 0, sizeof(float) * impl_->total, impl_->s()));
    return absl::OkStatus();
}

absl::StatusOr<LossResult> Qwen35GpuModel::forward(const PackedBatch& pb) {
    Impl& m = *impl_;
    LossResult r;
    r.label_tokens = pb.label_tokens();
    if (r.label_tokens == 0) {
        return absl::FailedPreconditionError("batch has no trained targets (every label is -100)");
    }
    const int64_t T = pb.tokens(), D = pb.num_docs(), H = m.c.hidden_size, V = m.c.vocab_size;
    const cudaStream_t s = m.s();
    std::vector<int32_t> ints;
    ints.reserve(static_cast<size_t>(3 * T + D + 1));
    for (const auto* v : {&pb.input_ids, &pb.targets, &pb.position_ids, &pb.cu_seqlens})
        ints.insert(ints.end(), v->begin(), v->end());
    DT_ASSIGN_OR_RETURN(m.batch_ints, m.dev.allocate(sizeof(int32_t) * ints.size()));
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        m.batch_ints.get(), ints.data(), sizeof(int32_t) * ints.size(), cudaMemcpyHostToDevice, s));
    const int32_t* base = m.batch_ints.as<int32_t>();
    m.ids = base;
    m.batch = GpuBatch{T, D, base + 3 * T, base + 2 * T};
    const size_t th = sizeof(bf16) * static_cast<size_t>(T * H);

    DT_ASSIGN_OR_RETURN(DeviceMemory emb, m.dev.allocate(th));
    DT_CUDA_RETURN_IF_ERROR(embedding_forward(emb.as<bf16>(), m.embed.w, m.ids, T, H, s));
    m.acts.clear();
    m.acts.resize(static_cast<size_t>(m.c.num_layers));
    const bf16* resid = emb.as<bf16>();
    const bf16* delta = nullptr;
    for (int64_t l = 0; l < m.c.num_layers; ++l) {
        DT_RETURN_IF_ERROR(m.layer_forward(l, resid, delta));
        if (l > 0) {
            LayerActs& prev = m.acts[static_cast<size_t>(l - 1)];
            prev.mlp_out.reset();
            if (m.recompute == Recompute::kLayer) {
                DeviceMemory keep = std::move(prev.x);
                prev = LayerActs{};
                prev.x = std::move(keep);
            }
        }
        resid = m.acts[static_cast<size_t>(l)].mid.as<bf16>();
        delta = m.acts[static_cast<size_t>(l)].mlp_out.as<bf16>();
    }
    DT_ASSIGN_OR_RETURN(m.xf, m.dev.allocate(th));
    DT_ASSIGN_OR_RETURN(m.rstdf, m.dev.allocate(sizeof(float) * T));
    DT_ASSIGN_OR_RETURN(DeviceMemory hf, m.dev.allocate(th));
    DT_CUDA_RETURN_IF_ERROR(
        rmsnorm_residual_forward(hf.as<bf16>(), m.xf.as<bf16>(), m.rstdf.as<float>(), delta, resid,
                                 m.final_norm.w, T, H, static_cast<float>(m.c.rms_norm_eps), s));
    LayerActs& last = m.acts.back();
    last.mlp_out.reset();
    if (m.recompute == Recompute::kLayer) {
        DeviceMemory keep = std::move(last.x);
        last = LayerActs{};
        last.x = std::move(keep);
    }

    DT_ASSIGN_OR_RETURN(DeviceMemory row_losses, m.dev.allocate(sizeof(float) * T));
    DT_ASSIGN_OR_RETURN(m.dhf, m.dev.allocate(th));
    FusedLinearCrossEntropyArgs ce;
    ce.row_losses = row_losses.as<float>();
    ce.dx = m.dhf.as<bf16>();
    ce.dw = m.lm_head.grad;
    ce.x = hf.as<bf16>();
    ce.w = m.lm_head.w;
    ce.targets = base + T;
    ce.tokens = T, ce.hidden = H, ce.vocab = V;
    ce.grad_scale = static_cast<float>(1.0 / static_cast<double>(r.label_tokens));
    if (!fused_linear_cross_entropy_supported(ce)) {
        return absl::InvalidArgumentError("fused linear cross-entropy: unsupported shape");
    }
    const size_t ws = fused_linear_cross_entropy_workspace_bytes(ce);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, m.dev.allocate(ws));
    DT_CUDA_RETURN_IF_ERROR(fused_linear_cross_entropy(ce, m.dev.blas(), work.get(), ws, s));
    std::vector<float> losses(static_cast<size_t>(T));
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(losses.data(), row_losses.get(), sizeof(float) * T,
                                            cudaMemcpyDeviceToHost, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    for (float v : losses) r.loss_sum += v;
    r.loss = r.loss_sum / static_cast<double>(r.label_tokens);
    m.pending = true;
    return r;
}

absl::Status Qwen35GpuModel::backward() {
    Impl& m = *impl_;
    if (!m.pending) return absl::FailedPreconditionError("backward without a pending forward");
    const int64_t T = m.batch.tokens, H = m.c.hidden_size;
    const cudaStream_t s = m.s();
    const size_t ws = rmsnorm_backward_workspace_bytes(T, H);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, m.dev.allocate(ws));
    DT_ASSIGN_OR_RETURN(DeviceMemory g, m.dev.allocate(sizeof(bf16) * static_cast<size_t>(T * H)));
    DT_CUDA_RETURN_IF_ERROR(rmsnorm_residual_backward(
        g.as<bf16>(), m.final_norm.grad, m.dhf.as<bf16>(), nullptr, m.xf.as<bf16>(), m.final_norm.w,
        m.rstdf.as<float>(), T, H, work.get(), ws, s));
    m.dhf.reset();
    m.xf.reset();
    for (int64_t l = m.c.num_layers - 1; l >= 0; --l) {
        DT_RETURN_IF_ERROR(m.layer_backward(l, g));
    }
    const size_t we = embedding_backward_workspace_bytes(T);
    DT_ASSIGN_OR_RETURN(DeviceMemory ework, m.dev.allocate(we));
    DT_CUDA_RETURN_IF_ERROR(embedding_backward(m.embed.grad, g.as<bf16>(), m.ids, T, H,
                                               m.c.vocab_size, ework.get(), we, s));
    m.pending = false;
    return absl::OkStatus();
}

absl::Status Qwen35GpuModel::download_grads(ParamSet& grads) const {
    const Impl& m = *impl_;
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.s()));
    for (size_t i = 0; i < grads.all().size(); ++i) {
        Tensor& t = grads.all()[i].value;
        DT_CUDA_RETURN_IF_ERROR(cudaMemcpy(t.data<float>(), m.grad.as<float>() + m.offset[i],
                                           sizeof(float) * m.numel[i], cudaMemcpyDeviceToHost));
    }
    return absl::OkStatus();
}

absl::StatusOr<double> Qwen35GpuModel::grad_norm() const {
    const Impl& m = *impl_;
    std::vector<GradNormTensor> ts;
    for (size_t i = 0; i < m.offset.size(); ++i)
        ts.push_back(GradNormTensor{m.grad.as<float>() + m.offset[i], m.numel[i], 0});
    const int64_t chunks = grad_norm_plan_chunks(ts.data(), static_cast<int>(ts.size()));
    const size_t ws = grad_norm_workspace_bytes(chunks);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, m.dev.allocate(ws));
    DT_ASSIGN_OR_RETURN(DeviceMemory dts, m.dev.allocate(sizeof(GradNormTensor) * ts.size()));
    DT_ASSIGN_OR_RETURN(DeviceMemory norm, m.dev.allocate(sizeof(float)));
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dts.get(), ts.data(), dts.bytes(), cudaMemcpyHostToDevice, m.s()));
    DT_CUDA_RETURN_IF_ERROR(global_grad_norm(norm.as<float>(), nullptr, dts.as<GradNormTensor>(),
                                             static_cast<int>(ts.size()), chunks, 0.0f, work.get(),
                                             ws, m.s()));
    float host = 0;
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(&host, norm.get(), sizeof(float), cudaMemcpyDeviceToHost, m.s()));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.s()));
    return static_cast<double>(host);
}

absl::Status Qwen35GpuModel::adamw_step_from_fresh_state(const AdamWHyper& hyper,
                                                         ParamSet& params) {
    Impl& m = *impl_;
    const size_t n = sizeof(float) * static_cast<size_t>(m.total);
    DT_ASSIGN_OR_RETURN(DeviceMemory mom, m.dev.allocate(2 * n));
    DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(mom.get(), 0, 2 * n, m.s()));
    std::vector<AdamWTensorArgs> ts;
    for (size_t i = 0; i < m.offset.size(); ++i) {
        const int64_t o = m.offset[i];
        ts.push_back(AdamWTensorArgs{m.master.as<float>() + o, mom.as<float>() + o,
                                     mom.as<float>() + m.total + o, m.grad.as<float>() + o,
                                     m.half.as<bf16>() + o, m.numel[i], 0});
    }
    const int64_t chunks = adamw_plan_chunks(ts.data(), static_cast<int>(ts.size()));
    DT_ASSIGN_OR_RETURN(DeviceMemory dts, m.dev.allocate(sizeof(AdamWTensorArgs) * ts.size()));
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dts.get(), ts.data(), dts.bytes(), cudaMemcpyHostToDevice, m.s()));
    DT_CUDA_RETURN_IF_ERROR(adamw_multi_tensor_step(dts.as<AdamWTensorArgs>(),
                                                    static_cast<int>(ts.size()), chunks, hyper,
                                                    /*step=*/1, nullptr, m.s()));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.s()));
    for (size_t i = 0; i < params.all().size(); ++i) {
        Tensor& t = params.all()[i].value;
        DT_CUDA_RETURN_IF_ERROR(cudaMemcpy(t.data<float>(), m.master.as<float>() + m.offset[i],
                                           sizeof(float) * m.numel[i], cudaMemcpyDeviceToHost));
    }
    return absl::OkStatus();
}

absl::Status Qwen35GpuModel::adamw_step(const AdamWHyper& hyper, int64_t step) {
    Impl& m = *impl_;
    if (!m.moments.get()) {
        const size_t n = sizeof(float) * static_cast<size_t>(m.total);
        DT_ASSIGN_OR_RETURN(m.moments, m.dev.allocate(2 * n));
        DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.moments.get(), 0, 2 * n, m.s()));
        std::vector<AdamWTensorArgs> ts;
        float* mom = m.moments.as<float>();
        for (size_t i = 0; i < m.offset.size(); ++i) {
            const int64_t o = m.offset[i];
            ts.push_back(AdamWTensorArgs{m.master.as<float>() + o, mom + o, mom + m.total + o,
                                         m.grad.as<float>() + o, m.half.as<bf16>() + o, m.numel[i],
                                         0});
        }
        m.adamw_chunks = adamw_plan_chunks(ts.data(), static_cast<int>(ts.size()));
        DT_ASSIGN_OR_RETURN(m.adamw_tensors, m.dev.allocate(sizeof(AdamWTensorArgs) * ts.size()));
        DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.adamw_tensors.get(), ts.data(),
                                                m.adamw_tensors.bytes(), cudaMemcpyHostToDevice,
                                                m.s()));
        DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.s()));  // `ts` goes away
    }
    DT_CUDA_RETURN_IF_ERROR(adamw_multi_tensor_step(m.adamw_tensors.as<AdamWTensorArgs>(),
                                                    static_cast<int>(m.offset.size()),
                                                    m.adamw_chunks, hyper, step, nullptr, m.s()));
    return absl::OkStatus();
}

int64_t Qwen35GpuModel::peak_device_bytes() const {
    return impl_->dev.allocator()->peak_bytes();
}

}  // namespace deltatune

#else  // CPU-only build

namespace deltatune {

struct Qwen35GpuModel::Impl {};
Qwen35GpuModel::Qwen35GpuModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Qwen35GpuModel::~Qwen35GpuModel() = default;
absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> Qwen35GpuModel::create(DeviceContext&,
                                                                       const Qwen35Config&,
                                                                       ParamSet&, Recompute) {
    return absl::FailedPreconditionError("built without CUDA (DELTATUNE_CUDA=OFF or no nvcc)");
}
absl::StatusOr<LossResult> Qwen35GpuModel::forward(const PackedBatch&) {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status Qwen35GpuModel::backward() {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status Qwen35GpuModel::zero_grads() {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status Qwen35GpuModel::download_grads(ParamSet&) const {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::StatusOr<double> Qwen35GpuModel::grad_norm() const {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::Status Qwen35GpuModel::adamw_step_from_fresh_state(const AdamWHyper&, ParamSet&) {
    return absl::FailedPreconditionError("built without CUDA");
}
absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> Qwen35GpuModel::create_random(DeviceContext&,
                                                                              const Qwen35Config&,
                                                                              Recompute, uint64_t) {
    return absl::FailedPreconditionError("built without CUDA (DELTATUNE_CUDA=OFF or no nvcc)");
}
absl::Status Qwen35GpuModel::adamw_step(const AdamWHyper&, int64_t) {
    return absl::FailedPreconditionError("built without CUDA");
}
int64_t Qwen35GpuModel::peak_device_bytes() const {
    return 0;
}

}  // namespace deltatune
#endif
