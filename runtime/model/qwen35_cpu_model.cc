// Layer stack, final norm and the chunked LM head + cross-entropy of the CPU reference model.
#include "runtime/model/qwen35_cpu_model.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernels/embedding/embedding.h"
#include "kernels/loss/cross_entropy.h"
#include "kernels/mlp/linear.h"
#include "kernels/norm/rmsnorm.h"
#include "kernels/tensor/rows.h"
#include "runtime/base/status_macros.h"
#include "runtime/model/lora.h"

namespace deltatune {

namespace {

// Tokens per LM-head chunk: bounds the logits buffer to chunk x V floats (the full (T, V) logits
// of a real vocabulary would not fit).
constexpr int64_t kHeadChunk = 256;

// A frozen base's projection, embedding and LM head weights take no gradient: the view's
// tensors for them become undefined, which backward skips.
void drop_frozen_weights(ModelView& g) {
    for (LayerView& l : g.layers) {
        for (size_t p = 0; p < kNumProj; ++p) l.weight(static_cast<Proj>(p)) = Tensor();
    }
    g.embed = Tensor();
    g.lm_head = Tensor();
}

}  // namespace

Qwen35CpuModel::FrozenBaseGrads Qwen35CpuModel::frozen_base_grads(const Qwen35Config& config,
                                                                  const ParamSet& params) {
    FrozenBaseGrads out;
    for (const NamedParam& p : params.all()) {
        out.set.add(p.name, p.value.shape(), p.stored_dtype, /*zero_fill=*/false);
    }
    ModelView all = model_view(config, out.set);
    std::set<const void*> dropped;
    for (size_t l = 0; l < all.layers.size(); ++l) {
        for (size_t p = 0; p < kNumProj; ++p) {
            const Tensor& t = all.layers[l].weight(static_cast<Proj>(p));
            if (t.defined()) dropped.insert(t.raw_data());
        }
    }
    dropped.insert(all.embed.raw_data());
    dropped.insert(all.lm_head.raw_data());
    for (size_t i = 0; i < out.set.all().size(); ++i) {
        if (!dropped.count(out.set.all()[i].value.raw_data())) out.written.push_back(i);
    }
    out.zero_written();
    return out;
}

void Qwen35CpuModel::FrozenBaseGrads::zero_written() {
    for (size_t i : written) set.all()[i].value.fill_zero();
}

Qwen35CpuModel::Qwen35CpuModel(const Qwen35Config& config, ParamSet& params)
    : config_(config),
      params_(params),
      view_(model_view(config, params)),
      tied_(!params.contains("lm_head.weight")) {}

int cpu_param_unit(const std::string& name, int64_t num_layers, bool tied) {
    constexpr std::string_view kLayers = "model.layers.";
    if (name == "model.embed_tokens.weight") return tied ? cpu_head_unit(num_layers) : 0;
    if (name.rfind(kLayers, 0) == 0) return std::stoi(name.substr(kLayers.size())) + 1;
    return cpu_head_unit(num_layers);
}

void Qwen35CpuModel::attach_adapter(ParamSet& adapters, ParamSet& adapter_grads, float scale) {
    attach_lora(config_, view_, adapters, scale);
    adapter_grads_ = &adapter_grads;
    lora_scale_ = scale;
}

BatchMeta Qwen35CpuModel::meta(const PackedBatch& b) const {
    return {b.tokens(), b.cu_seqlens.data(), b.num_docs(), b.position_ids.data()};
}

absl::Status Qwen35CpuModel::acquire(int unit, CpuParamSource::Phase phase) {
    return source_ ? source_->acquire(unit, phase) : absl::OkStatus();
}

absl::Status Qwen35CpuModel::release(int unit, CpuParamSource::Phase phase) {
    return source_ ? source_->release(unit, phase) : absl::OkStatus();
}

absl::Status Qwen35CpuModel::run_layers(const PackedBatch& batch, Buf& x) {
    using Phase = CpuParamSource::Phase;
    const int64_t T = batch.tokens(), H = config_.hidden_size;
    const BatchMeta m = meta(batch);
    x.assign(T * H, 0.0f);
    const int embed_unit = tied_ ? head_unit() : 0;
    DT_RETURN_IF_ERROR(acquire(embed_unit, Phase::kForward));
    embedding_forward_ref(x.data(), ptr(view_.embed), batch.input_ids.data(), T, H);
    if (!tied_) DT_RETURN_IF_ERROR(release(0, Phase::kForward));
    acts_.resize(static_cast<size_t>(config_.num_layers));
    Buf block_out(T * H);
    for (int64_t l = 0; l < config_.num_layers; ++l) {
        LayerActs& a = acts_[static_cast<size_t>(l)];
        const LayerView& w = view_.layers[static_cast<size_t>(l)];
        DT_RETURN_IF_ERROR(acquire(static_cast<int>(l) + 1, Phase::kForward));
        a.x = x;
        if (w.type == LayerType::kLinearAttention) {
            gdn_block_forward(config_, w, m, a.x.data(), block_out.data(), a.gdn);
        } else {
            attention_block_forward(config_, w, m, a.x.data(), block_out.data(), a.attn);
        }
        for (int64_t i = 0; i < T * H; ++i) x[i] += block_out[i];
        a.mid = x;
        mlp_block_forward(config_, w, m, a.mid.data(), block_out.data(), a.mlp);
        for (int64_t i = 0; i < T * H; ++i) x[i] += block_out[i];
        DT_RETURN_IF_ERROR(release(static_cast<int>(l) + 1, Phase::kForward));
    }
    if (!tied_) DT_RETURN_IF_ERROR(acquire(head_unit(), Phase::kForward));
    final_x_ = x;
    final_normed_.resize(T * H);
    final_rstd_.resize(T);
    rmsnorm_forward_ref(final_normed_.data(), final_rstd_.data(), final_x_.data(),
                        ptr(view_.final_norm), T, H, static_cast<float>(config_.rms_norm_eps));
    return absl::OkStatus();
}

absl::StatusOr<LossResult> Qwen35CpuModel::forward(const PackedBatch& batch) {
    LossResult r;
    r.label_tokens = batch.label_tokens();
    if (r.label_tokens == 0) {
        return absl::FailedPreconditionError("batch has no trained targets (every label is -100)");
    }
    Buf x;
    DT_RETURN_IF_ERROR(run_layers(batch, x));
    const int64_t H = config_.hidden_size, V = config_.vocab_size;
    const HeadRows head = head_rows(batch);
    const int64_t T = head.count();
    Buf logits(kHeadChunk * V), losses(kHeadChunk), lse(kHeadChunk);
    for (int64_t t0 = 0; t0 < T; t0 += kHeadChunk) {
        const int64_t n = std::min(kHeadChunk, T - t0);
        linear_forward_ref(logits.data(), head.x() + t0 * H, ptr(view_.lm_head), n, H, V);
        cross_entropy_forward_ref(losses.data(), lse.data(), logits.data(), head.targets() + t0, n,
                                  V);
        for (int64_t i = 0; i < n; ++i) r.loss_sum += losses[i];
    }
    DT_RETURN_IF_ERROR(release(head_unit(), CpuParamSource::Phase::kForward));
    r.loss = r.loss_sum / static_cast<double>(r.label_tokens);
    batch_ = &batch;
    label_tokens_ = r.label_tokens;
    return r;
}

absl::Status Qwen35CpuModel::backward(ParamSet& grads) {
    return backward(grads, 1.0 / static_cast<double>(label_tokens_));
}

Qwen35CpuModel::HeadRows Qwen35CpuModel::head_rows(const PackedBatch& batch) const {
    HeadRows h;
    h.all = final_normed_.data();
    h.all_targets = batch.targets.data();
    h.all_count = batch.tokens();
    if (label_only_head_) h.labeled = label_rows(batch.targets, 0.0);
    if (h.labeled) {
        const int64_t H = config_.hidden_size;
        h.gathered.resize(h.labeled->rows.size() * H);
        gather_rows_ref(h.gathered.data(), h.all, h.labeled->rows.data(), h.count(), H);
    }
    return h;
}

// LM head and final norm: dx = d(last layer's output). Logits are recomputed chunk by chunk
// (never stored whole), on the head's rows; the rows without a label get a zero gradient.
absl::Status Qwen35CpuModel::head_backward(const PackedBatch& batch, const ModelView& g,
                                           float grad_scale, Buf& dx) {
    const int64_t T = batch.tokens(), H = config_.hidden_size, V = config_.vocab_size;
    DT_RETURN_IF_ERROR(acquire(head_unit(), CpuParamSource::Phase::kBackward));
    const HeadRows head = head_rows(batch);
    const int64_t rows = head.count();
    Buf dhead(rows * H), logits(kHeadChunk * V), losses(kHeadChunk), lse(kHeadChunk),
        dlogits(kHeadChunk * V);
    for (int64_t t0 = 0; t0 < rows; t0 += kHeadChunk) {
        const int64_t n = std::min(kHeadChunk, rows - t0);
        const float* h = head.x() + t0 * H;
        const int32_t* tg = head.targets() + t0;
        linear_forward_ref(logits.data(), h, ptr(view_.lm_head), n, H, V);
        cross_entropy_forward_ref(losses.data(), lse.data(), logits.data(), tg, n, V);
        cross_entropy_backward_ref(dlogits.data(), logits.data(), lse.data(), tg, n, V, grad_scale);
        linear_backward_ref(dhead.data() + t0 * H, g.lm_head.defined() ? ptr(g.lm_head) : nullptr,
                            dlogits.data(), h, ptr(view_.lm_head), n, H, V);
    }
    Buf spread;
    if (head.labeled) {
        spread.resize(T * H);
        gather_rows_ref(spread.data(), dhead.data(), head.labeled->position.data(), T, H);
    }
    const Buf& dnormed = head.labeled ? spread : dhead;
    dx.assign(T * H, 0.0f);
    rmsnorm_backward_ref(dx.data(), ptr(g.final_norm), dnormed.data(), final_x_.data(),
                         ptr(view_.final_norm), final_rstd_.data(), T, H);
    // Tied: the embedding's gradient is still to come, into the same unit.
    if (!tied_) DT_RETURN_IF_ERROR(release(head_unit(), CpuParamSource::Phase::kBackward));
    return absl::OkStatus();
}

absl::Status Qwen35CpuModel::backward(ParamSet& grads, double loss_scale) {
    using Phase = CpuParamSource::Phase;
    if (batch_ == nullptr)
        return absl::FailedPreconditionError("backward without a pending forward");
    const PackedBatch& batch = *batch_;
    batch_ = nullptr;
    ModelView g = model_view(config_, grads);
    if (adapter_grads_) {
        attach_lora(config_, g, *adapter_grads_, lora_scale_);
        drop_frozen_weights(g);
    }
    Buf dx;
    DT_RETURN_IF_ERROR(head_backward(batch, g, static_cast<float>(loss_scale), dx));

    const BatchMeta m = meta(batch);
    for (int64_t l = config_.num_layers - 1; l >= 0; --l) {
        LayerActs& a = acts_[static_cast<size_t>(l)];
        const LayerView& w = view_.layers[static_cast<size_t>(l)];
        const LayerView& gl = g.layers[static_cast<size_t>(l)];
        DT_RETURN_IF_ERROR(acquire(static_cast<int>(l) + 1, Phase::kBackward));
        // dx is d(layer output); the MLP adds its input gradient to it, giving d(mid).
        mlp_block_backward(config_, w, gl, m, a.mid.data(), dx.data(), dx.data(), a.mlp);
        if (w.type == LayerType::kLinearAttention) {
            gdn_block_backward(config_, w, gl, m, a.x.data(), dx.data(), dx.data(), a.gdn);
        } else {
            attention_block_backward(config_, w, gl, m, a.x.data(), dx.data(), dx.data(), a.attn);
        }
        a = LayerActs{};
        DT_RETURN_IF_ERROR(release(static_cast<int>(l) + 1, Phase::kBackward));
    }
    const int embed_unit = tied_ ? head_unit() : 0;
    if (!tied_) DT_RETURN_IF_ERROR(acquire(0, Phase::kBackward));
    if (g.embed.defined()) {
        embedding_backward_ref(ptr(g.embed), dx.data(), batch.input_ids.data(), batch.tokens(),
                               config_.hidden_size);
    }
    return release(embed_unit, Phase::kBackward);
}

absl::StatusOr<Buf> Qwen35CpuModel::hidden_states(const PackedBatch& batch) {
    Buf x;
    DT_RETURN_IF_ERROR(run_layers(batch, x));
    DT_RETURN_IF_ERROR(release(head_unit(), CpuParamSource::Phase::kForward));
    acts_.clear();
    return final_normed_;
}

absl::StatusOr<Buf> Qwen35CpuModel::logits(const PackedBatch& batch) {
    Buf x;
    DT_RETURN_IF_ERROR(run_layers(batch, x));
    acts_.clear();
    const int64_t T = batch.tokens(), H = config_.hidden_size, V = config_.vocab_size;
    Buf out(T * V);
    linear_forward_ref(out.data(), final_normed_.data(), ptr(view_.lm_head), T, H, V);
    DT_RETURN_IF_ERROR(release(head_unit(), CpuParamSource::Phase::kForward));
    return out;
}

}  // namespace deltatune
