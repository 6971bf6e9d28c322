// Qwen35GpuModel: parameter upload, the layer stack with the residual adds fused into the RMSNorm
// kernels (the forward's stages and the fused linear cross-entropy head in
// qwen35_gpu_model_forward.cc), backward in reverse layer order with optional per-layer
// recompute. Layer l computes
//   x_l = mid_{l-1} + mlp_{l-1} (fused with input norm),  mid_l = x_l + block(norm(x_l)) (fused
//   with post norm),  mlp_l = mlp(norm(mid_l));
// backward walks the same fused kernels: their ds is the gradient of both summands.
#include "runtime/model/qwen35_gpu_model.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <map>

#include "kernels/embedding/embedding.h"
#include "kernels/loss/fused_linear_cross_entropy.h"
#include "kernels/norm/rmsnorm.h"
#include "kernels/optim/grad_rows.h"
#include "kernels/tensor/cast.h"
#include "kernels/tensor/init_fill.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/model/qwen35_gpu_model_impl.h"
#include "runtime/model/qwen35_params.h"

namespace deltatune {

using Phase = GpuParamSource::Phase;

GpuParam Qwen35GpuModel::Impl::param(int i, const GpuUnitPtrs& u) const {
    if (i < 0) return GpuParam{};
    const GpuParamSlot& slot = layout.slots[static_cast<size_t>(i)];
    if (lora) {  // frozen: the bf16 weight (and fp32 read copy), no gradient kept
        const int64_t o = sink_offset[static_cast<size_t>(i)];
        float* g = o >= 0 ? sink.as<float>() + o : nullptr;
        if (slot.replicated)
            return GpuParam{u.rep_half + slot.offset, u.rep_master + slot.offset, g};
        return GpuParam{u.half ? u.half + slot.offset : nullptr,
                        u.master ? u.master + slot.offset : nullptr, g};
    }
    if (slot.replicated) {
        return GpuParam{u.rep_half + slot.offset, u.rep_master + slot.offset,
                        u.rep_grad + slot.offset};
    }
    return GpuParam{u.half ? u.half + slot.offset : nullptr,
                    u.master ? u.master + slot.offset : nullptr,
                    u.grad ? u.grad + slot.offset : nullptr,
                    !fresh.empty() && fresh[static_cast<size_t>(i)] != 0};
}

GpuLayer Qwen35GpuModel::Impl::bind_layer(int64_t l, const GpuUnitPtrs& u) const {
    const LayerParamIndex& x = layer_idx[static_cast<size_t>(l)];
    GpuLayer g;
    g.type = x.type;
    g.input_norm = param(x.input_norm, u), g.post_norm = param(x.post_norm, u);
    g.mlp_gate = param(x.mlp_gate, u), g.mlp_up = param(x.mlp_up, u);
    g.mlp_down = param(x.mlp_down, u);
    g.in_proj_qkv = param(x.in_proj_qkv, u), g.in_proj_z = param(x.in_proj_z, u);
    g.in_proj_b = param(x.in_proj_b, u), g.in_proj_a = param(x.in_proj_a, u);
    g.conv_w = param(x.conv_w, u), g.A_log = param(x.A_log, u), g.dt_bias = param(x.dt_bias, u);
    g.gdn_norm = param(x.gdn_norm, u), g.out_proj = param(x.out_proj, u);
    g.q_proj = param(x.q_proj, u), g.k_proj = param(x.k_proj, u), g.v_proj = param(x.v_proj, u);
    g.o_proj = param(x.o_proj, u), g.q_norm = param(x.q_norm, u), g.k_norm = param(x.k_norm, u);
    if (lora) attach_lora_pairs(l, g);
    if (fp8_projections) {  // the gate inputs in_proj_a and in_proj_b stay bf16
        for (GpuParam* p : {&g.mlp_gate, &g.mlp_up, &g.mlp_down, &g.in_proj_qkv, &g.in_proj_z,
                            &g.out_proj, &g.q_proj, &g.k_proj, &g.v_proj, &g.o_proj}) {
            p->fp8 = true;
        }
    }
    return g;
}

absl::Status Qwen35GpuModel::Impl::layer_forward(int64_t l, const GpuLayer& w, const bf16* resid,
                                                 const bf16* delta, bool keep_for_backward) {
    const int64_t T = batch.tokens, H = c.hidden_size;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const size_t th = sizeof(bf16) * static_cast<size_t>(T * H), t4 = sizeof(float) * T;
    LayerActs& A = acts[static_cast<size_t>(l)];
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
        GpuCtx x = ctx();
        x.keep_for_backward = keep_for_backward;
        DT_RETURN_IF_ERROR(gpu_gdn_forward(x, w, A.a.as<bf16>(), block_out.as<bf16>(), A.gdn));
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

// g: on entry d(x_{l+1}) (the gradient of mid_l and mlp_l), on return d(x_l). The layer's unit
// is acquired for the backward here and released (its gradients complete) at the end.
absl::Status Qwen35GpuModel::Impl::layer_backward(int64_t l, DeviceMemory& g) {
    const int64_t T = batch.tokens, H = c.hidden_size;
    const size_t th = sizeof(bf16) * static_cast<size_t>(T * H);
    const int unit = static_cast<int>(l) + 1;
    DT_ASSIGN_OR_RETURN(GpuUnitPtrs u, source->acquire(unit, Phase::kBackward, /*grads=*/true));
    const GpuLayer w = bind_layer(l, u);
    LayerActs& A = acts[static_cast<size_t>(l)];
    if (recomputes(l)) {
        DT_RETURN_IF_ERROR(
            layer_forward(l, w, A.x.as<bf16>(), nullptr, /*keep_for_backward=*/true));
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
    gradients_written(unit);
    return source->release(unit, Phase::kBackward);
}

void Qwen35GpuModel::Impl::gradients_written(int unit) {
    for (size_t i = 0; i < layout.slots.size() && i < fresh.size(); ++i) {
        if (layout.slots[i].unit == unit) fresh[i] = 0;
    }
}

Qwen35GpuModel::Impl::~Impl() {
    if (staging) cudaFreeHost(staging);
}

Qwen35GpuModel::Qwen35GpuModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Qwen35GpuModel::~Qwen35GpuModel() {
    if (impl_ && impl_->source) (void)impl_->source->synchronize();  // bounded for sharded sources
}

namespace {

// The model's bookkeeping over `params` (names and shapes; values unused): layout and indices.
absl::StatusOr<std::unique_ptr<Qwen35GpuModel::Impl>> new_impl(DeviceContext& ctx,
                                                               const Qwen35Config& config,
                                                               const ParamSet& params,
                                                               const GpuParamLayout& layout,
                                                               Recompute recompute) {
    if (ctx.device().is_cpu() || !ctx.gemm()) {
        return absl::FailedPreconditionError("Qwen35GpuModel needs a CUDA device context");
    }
    if (layout.slots.size() != params.all().size() ||
        layout.num_units != static_cast<int>(config.num_layers) + 2) {
        return absl::InvalidArgumentError("parameter layout does not match the model config");
    }
    auto m = std::make_unique<Qwen35GpuModel::Impl>(ctx, config, recompute);
    m->layout = layout;
    std::map<const void*, int> index;
    for (size_t i = 0; i < params.all().size(); ++i)
        index[params.all()[i].value.data<float>()] = static_cast<int>(i);
    ModelView v = model_view(config, const_cast<ParamSet&>(params));
    auto at = [&](const Tensor& t) { return t.defined() ? index.at(t.data<float>()) : -1; };
    m->embed_idx = at(v.embed), m->final_norm_idx = at(v.final_norm);
    m->lm_head_idx = at(v.lm_head);
    for (const LayerView& lv : v.layers) {
        LayerParamIndex g;
        g.type = lv.type;
        g.input_norm = at(lv.input_norm), g.post_norm = at(lv.post_norm);
        g.mlp_gate = at(lv.mlp_gate), g.mlp_up = at(lv.mlp_up), g.mlp_down = at(lv.mlp_down);
        g.in_proj_qkv = at(lv.in_proj_qkv), g.in_proj_z = at(lv.in_proj_z);
        g.in_proj_b = at(lv.in_proj_b), g.in_proj_a = at(lv.in_proj_a);
        g.conv_w = at(lv.conv_w), g.A_log = at(lv.A_log), g.dt_bias = at(lv.dt_bias);
        g.gdn_norm = at(lv.gdn_norm), g.out_proj = at(lv.out_proj);
        g.q_proj = at(lv.q_proj), g.k_proj = at(lv.k_proj), g.v_proj = at(lv.v_proj);
        g.o_proj = at(lv.o_proj), g.q_norm = at(lv.q_norm), g.k_norm = at(lv.k_norm);
        m->layer_idx.push_back(g);
    }
    m->gemm_grad.assign(params.all().size(), 0);
    m->fresh.assign(params.all().size(), 0);
    for (const LayerParamIndex& g : m->layer_idx) {
        for (int i : {g.mlp_gate, g.mlp_up, g.mlp_down, g.in_proj_qkv, g.in_proj_z, g.in_proj_b,
                      g.in_proj_a, g.out_proj, g.q_proj, g.k_proj, g.v_proj, g.o_proj}) {
            if (i >= 0) m->gemm_grad[static_cast<size_t>(i)] = 1;
        }
    }
    // An untied LM head's gradient is written by the loss's first dW GEMM (a tied one also
    // takes the embedding's scatter-add).
    if (!layout.tied && m->lm_head_idx >= 0) m->gemm_grad[static_cast<size_t>(m->lm_head_idx)] = 1;
    return m;
}

// The single-device model: flat buffers holding every unit, uploaded from `params` when
// `upload`, otherwise left for the caller to fill.
absl::StatusOr<std::unique_ptr<Qwen35GpuModel::Impl>> build_flat_impl(DeviceContext& ctx,
                                                                      const Qwen35Config& config,
                                                                      ParamSet& params,
                                                                      Recompute recompute,
                                                                      bool upload) {
    const GpuParamLayout layout =
        make_gpu_param_layout(config, params, /*replicate_fp32_read=*/false);
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Qwen35GpuModel::Impl> m,
                        new_impl(ctx, config, params, layout, recompute));
    m->total = layout.total_unit_numel();
    const size_t n = static_cast<size_t>(m->total);
    DT_ASSIGN_OR_RETURN(m->master, ctx.allocate(n * sizeof(float)));
    DT_ASSIGN_OR_RETURN(m->half, ctx.allocate(n * sizeof(bf16)));
    DT_ASSIGN_OR_RETURN(m->grad, ctx.allocate(n * sizeof(float)));
    m->flat = std::make_unique<FlatParamSource>(layout, m->half.as<bf16>(), m->master.as<float>(),
                                                m->grad.as<float>(), ctx.compute_stream());
    m->source = m->flat.get();
    for (const GpuParamSlot& slot : layout.slots) {
        m->offset.push_back(m->flat->unit_begin(slot.unit) + slot.offset);
        m->numel.push_back(slot.numel);
    }
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
    return m;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> Qwen35GpuModel::create(DeviceContext& ctx,
                                                                       const Qwen35Config& config,
                                                                       ParamSet& params,
                                                                       Recompute recompute) {
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Impl> m,
                        build_flat_impl(ctx, config, params, recompute, /*upload=*/true));
    std::unique_ptr<Qwen35GpuModel> model(new Qwen35GpuModel(std::move(m)));
    DT_RETURN_IF_ERROR(model->zero_grads());
    return model;
}

absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> Qwen35GpuModel::create_random(
    DeviceContext& ctx, const Qwen35Config& config, Recompute recompute, uint64_t seed) {
    // Host tensors for names, shapes and distinct addresses only: their pages are never written.
    ParamSet layout = make_qwen35_params(config, config.tie_word_embeddings, /*zero_fill=*/false);
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Impl> m,
                        build_flat_impl(ctx, config, layout, recompute, /*upload=*/false));
    const cudaStream_t s = m->s();
    const float std_dev = static_cast<float>(config.initializer_range);
    for (size_t i = 0; i < layout.all().size(); ++i) {
        const GpuInitRule r = gpu_init_rule(layout.all()[i].name, std_dev);
        DT_CUDA_RETURN_IF_ERROR(init_fill_f32(m->master.as<float>() + m->offset[i], m->numel[i],
                                              static_cast<InitFill>(r.kind), r.a, r.b, seed, i, s));
    }
    DT_CUDA_RETURN_IF_ERROR(
        cast_f32_to_bf16(m->half.as<bf16>(), m->master.as<float>(), m->total, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    std::unique_ptr<Qwen35GpuModel> model(new Qwen35GpuModel(std::move(m)));
    DT_RETURN_IF_ERROR(model->zero_grads());
    return model;
}

absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> Qwen35GpuModel::create_with_source(
    DeviceContext& ctx, const Qwen35Config& config, const GpuParamLayout& layout,
    GpuParamSource& source, Recompute recompute) {
    ParamSet names = make_qwen35_params(config, layout.tied, /*zero_fill=*/false);
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Impl> m, new_impl(ctx, config, names, layout, recompute));
    m->source = &source;
    return std::unique_ptr<Qwen35GpuModel>(new Qwen35GpuModel(std::move(m)));
}

absl::Status Qwen35GpuModel::backward() {
    Impl& m = *impl_;
    if (!m.pending) return absl::FailedPreconditionError("backward without a pending forward");
    const int64_t T = m.batch.tokens, H = m.c.hidden_size;
    const cudaStream_t s = m.s();
    const int head_unit = m.layout.head_unit();
    const GpuParam final_norm = m.param(m.final_norm_idx, m.head);
    const size_t ws = rmsnorm_backward_workspace_bytes(T, H);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, m.dev.allocate(ws));
    DT_ASSIGN_OR_RETURN(DeviceMemory g, m.dev.allocate(sizeof(bf16) * static_cast<size_t>(T * H)));
    DT_CUDA_RETURN_IF_ERROR(rmsnorm_residual_backward(
        g.as<bf16>(), final_norm.grad, m.dhf.as<bf16>(), nullptr, m.xf.as<bf16>(), final_norm.w,
        m.rstdf.as<float>(), T, H, work.get(), ws, s));
    m.dhf.reset();
    m.xf.reset();
    if (!m.layout.tied) DT_RETURN_IF_ERROR(m.source->release(head_unit, Phase::kBackward));
    for (int64_t l = m.c.num_layers - 1; l >= 0; --l) {
        DT_RETURN_IF_ERROR(m.layer_backward(l, g));
    }
    GpuUnitPtrs e = m.head;
    if (!m.layout.tied) {
        DT_ASSIGN_OR_RETURN(e, m.source->acquire(0, Phase::kBackward, true));
    }
    const size_t we = embedding_backward_sorted_workspace_bytes(T, H);
    DT_ASSIGN_OR_RETURN(DeviceMemory ework, m.dev.allocate(we));
    float* dembed = m.param(m.embed_idx, e).grad;  // null: frozen
    if (dembed) {
        DT_CUDA_RETURN_IF_ERROR(embedding_backward_sorted(
            dembed, g.as<bf16>(), m.ids_sorted, m.id_positions_sorted, T, H, ework.get(), we, s));
        if (e.embed_rows_touched) {
            DT_CUDA_RETURN_IF_ERROR(mark_rows(e.embed_rows_touched, m.ids_sorted, T, s));
        }
    }
    DT_RETURN_IF_ERROR(m.source->release(m.layout.tied ? head_unit : 0, Phase::kBackward));
    m.head = GpuUnitPtrs{};
    m.pending = false;
    return absl::OkStatus();
}

void Qwen35GpuModel::keep_activations_of_last(int64_t layers) {
    impl_->keep_last = std::clamp<int64_t>(layers, 0, impl_->c.num_layers);
}

int64_t Qwen35GpuModel::kept_layers() const {
    return impl_->recompute == Recompute::kLayer ? impl_->keep_last : impl_->c.num_layers;
}

const std::vector<char>& Qwen35GpuModel::mark_gemm_gradients_fresh() {
    impl_->fresh = impl_->gemm_grad;
    return impl_->gemm_grad;
}

std::vector<size_t> Qwen35GpuModel::take_unwritten_fresh_gradients() {
    std::vector<size_t> out;
    for (size_t i = 0; i < impl_->fresh.size(); ++i) {
        if (impl_->fresh[i]) out.push_back(i);
    }
    std::fill(impl_->fresh.begin(), impl_->fresh.end(), 0);
    return out;
}

int64_t Qwen35GpuModel::peak_device_bytes() const {
    return impl_->dev.allocator()->peak_bytes();
}

void Qwen35GpuModel::set_label_only_head(bool on) {
    impl_->label_only_head = on;
}

void Qwen35GpuModel::set_fp8_projections(bool on) {
    impl_->fp8_projections = on;
}

}  // namespace deltatune

#endif  // DELTATUNE_HAVE_CUDA (qwen35_gpu_model_cpu_only.cc: the CPU-only build)
