// Qwen35GpuModel::forward in its stages: the batch's upload, the embedding, the decoder layers
// and the final norm with the fused LM head and loss (qwen35_gpu_model.cc has the rest).
#include "runtime/model/qwen35_gpu_model.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <optional>

#include "kernels/embedding/embedding.h"
#include "kernels/loss/fused_linear_cross_entropy.h"
#include "kernels/norm/rmsnorm.h"
#include "kernels/tensor/rows.h"
#include "runtime/base/status_macros.h"
#include "runtime/batch/label_rows.h"
#include "runtime/device/cuda_status.h"
#include "runtime/model/qwen35_gpu_model_impl.h"

namespace deltatune {

using Phase = GpuParamSource::Phase;

namespace {

using Impl = Qwen35GpuModel::Impl;

// The batch's ids, targets, positions, document bounds, the embedding backward's id order
// (sorted here, so the device never waits for a sort) and the LM head's rows in one upload
// through page-locked staging; m.batch and its pointers into it.
absl::Status upload_batch(Impl& m, const PackedBatch& pb) {
    const int64_t T = pb.tokens(), D = pb.num_docs();
    const std::optional<LabelRows> head =
        m.label_only_head ? label_rows(pb.targets, kGpuLabelRowsMinUnlabeled) : std::nullopt;
    m.head_count = head ? static_cast<int64_t>(head->rows.size()) : T;
    const size_t count = static_cast<size_t>(5 * T + D + 1 + (head ? 2 * m.head_count + T : 0));
    if (m.staging_count < count) {
        // The previous forward's copy finished before its loss was read back.
        if (m.staging) DT_CUDA_RETURN_IF_ERROR(cudaFreeHost(m.staging));
        m.staging = nullptr, m.staging_count = 0;
        DT_CUDA_RETURN_IF_ERROR(
            cudaMallocHost(reinterpret_cast<void**>(&m.staging), sizeof(int32_t) * count));
        m.staging_count = count;
    }
    int32_t* at = m.staging;
    for (const auto* v : {&pb.input_ids, &pb.targets, &pb.position_ids, &pb.cu_seqlens})
        at = std::copy(v->begin(), v->end(), at);
    embedding_id_order(pb.input_ids.data(), T, at, at + T);
    at += 2 * T;
    if (head) {
        for (const auto* v : {&head->rows, &head->targets, &head->position})
            at = std::copy(v->begin(), v->end(), at);
    }
    DT_ASSIGN_OR_RETURN(m.batch_ints, m.dev.allocate(sizeof(int32_t) * count));
    DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.batch_ints.get(), m.staging, sizeof(int32_t) * count,
                                            cudaMemcpyHostToDevice, m.s()));
    const int32_t* base = m.batch_ints.as<int32_t>();
    m.ids = base;
    m.ids_sorted = base + 3 * T + D + 1;
    m.id_positions_sorted = m.ids_sorted + T;
    m.head_rows = head ? m.id_positions_sorted + T : nullptr;
    m.head_targets = head ? m.head_rows + m.head_count : base + T;
    m.head_position = head ? m.head_targets + m.head_count : nullptr;
    m.batch = GpuBatch{T, D, base + 3 * T, base + 2 * T};
    m.attention_schedule = GpuAttentionSchedule{};  // the previous batch's list is freed
    m.batch.attention_schedule = &m.attention_schedule;
    for (int64_t d = 0; d < D; ++d) {
        m.batch.max_doc_tokens =
            std::max<int64_t>(m.batch.max_doc_tokens, pb.cu_seqlens[d + 1] - pb.cu_seqlens[d]);
    }
    return absl::OkStatus();
}

// The embedding of the batch's ids (T x H bf16). With tied embeddings the head unit holds the
// embedding: acquired here, kept to the end of the forward.
absl::StatusOr<DeviceMemory> embed_tokens(Impl& m) {
    const int64_t T = m.batch.tokens, H = m.c.hidden_size;
    if (m.layout.tied) {
        DT_ASSIGN_OR_RETURN(m.head, m.source->acquire(m.layout.head_unit(), Phase::kForward, true));
    }
    DT_ASSIGN_OR_RETURN(DeviceMemory emb,
                        m.dev.allocate(sizeof(bf16) * static_cast<size_t>(T * H)));
    GpuUnitPtrs e = m.head;
    if (!m.layout.tied) {
        DT_ASSIGN_OR_RETURN(e, m.source->acquire(0, Phase::kForward, false));
    }
    DT_RETURN_IF_ERROR(m.source->refresh_embedding_rows(m.ids_sorted, T));
    DT_CUDA_RETURN_IF_ERROR(
        embedding_forward(emb.as<bf16>(), m.param(m.embed_idx, e).w, m.ids, T, H, m.s()));
    if (!m.layout.tied) DT_RETURN_IF_ERROR(m.source->release(0, Phase::kForward));
    return emb;
}

// Layer l's activations once the next layer has read them: its input alone when the backward
// recomputes it.
void keep_only_input(Impl& m, int64_t l) {
    LayerActs& prev = m.acts[static_cast<size_t>(l)];
    prev.mlp_out.reset();
    if (m.recomputes(l)) {
        DeviceMemory keep = std::move(prev.x);
        prev = LayerActs{};
        prev.x = std::move(keep);
    }
}

// Every decoder layer over the embedding; `resid` and `delta` end as the last layer's residual
// stream and MLP output (added by the final norm).
absl::Status decoder_forward(Impl& m, const bf16* emb, const bf16*& resid, const bf16*& delta) {
    m.acts.clear();
    m.acts.resize(static_cast<size_t>(m.c.num_layers));
    resid = emb;
    delta = nullptr;
    for (int64_t l = 0; l < m.c.num_layers; ++l) {
        const int unit = static_cast<int>(l) + 1;
        DT_ASSIGN_OR_RETURN(GpuUnitPtrs u, m.source->acquire(unit, Phase::kForward, false));
        // Without recomputation these activations feed the backward; with it, the backward's
        // own recomputation of the layer keeps what it needs.
        DT_RETURN_IF_ERROR(m.layer_forward(l, m.bind_layer(l, u), resid, delta, !m.recomputes(l)));
        DT_RETURN_IF_ERROR(m.source->release(unit, Phase::kForward));
        if (l > 0) keep_only_input(m, l - 1);
        resid = m.acts[static_cast<size_t>(l)].mid.as<bf16>();
        delta = m.acts[static_cast<size_t>(l)].mlp_out.as<bf16>();
    }
    return absl::OkStatus();
}

// The final norm and the fused LM head + cross-entropy (its gradient scaled by `grad_scale`):
// the loss sum into r, the head's input gradient kept for the backward.
absl::Status head_loss(Impl& m, const bf16* resid, const bf16* delta, double grad_scale,
                       LossResult& r) {
    const int64_t T = m.batch.tokens, H = m.c.hidden_size;
    const cudaStream_t s = m.s();
    const size_t th = sizeof(bf16) * static_cast<size_t>(T * H);
    const int head_unit = m.layout.head_unit();
    if (!m.layout.tied) {
        DT_ASSIGN_OR_RETURN(m.head, m.source->acquire(head_unit, Phase::kForward, true));
    }
    const GpuParam final_norm = m.param(m.final_norm_idx, m.head);
    const GpuParam lm_head = m.param(m.lm_head_idx, m.head);
    DT_ASSIGN_OR_RETURN(m.xf, m.dev.allocate(th));
    DT_ASSIGN_OR_RETURN(m.rstdf, m.dev.allocate(sizeof(float) * T));
    DT_ASSIGN_OR_RETURN(DeviceMemory hf, m.dev.allocate(th));
    DT_CUDA_RETURN_IF_ERROR(
        rmsnorm_residual_forward(hf.as<bf16>(), m.xf.as<bf16>(), m.rstdf.as<float>(), delta, resid,
                                 final_norm.w, T, H, static_cast<float>(m.c.rms_norm_eps), s));
    keep_only_input(m, m.c.num_layers - 1);

    // The head's rows: the labeled ones gathered (N < T), or all of hf.
    const int64_t N = m.head_count;
    const size_t nh = sizeof(bf16) * static_cast<size_t>(N * H);
    DeviceMemory head_x, head_dx;
    if (N < T) {
        DT_ASSIGN_OR_RETURN(head_x, m.dev.allocate(nh));
        DT_ASSIGN_OR_RETURN(head_dx, m.dev.allocate(nh));
        DT_CUDA_RETURN_IF_ERROR(
            gather_rows(head_x.as<bf16>(), hf.as<bf16>(), m.head_rows, N, H, s));
    }
    DT_ASSIGN_OR_RETURN(DeviceMemory row_losses, m.dev.allocate(sizeof(float) * N));
    DT_ASSIGN_OR_RETURN(m.dhf, m.dev.allocate(th));
    FusedLinearCrossEntropyArgs ce;
    ce.row_losses = row_losses.as<float>();
    ce.dx = N < T ? head_dx.as<bf16>() : m.dhf.as<bf16>();
    ce.dw = lm_head.grad;
    ce.dw_fresh = lm_head.fresh;
    ce.x = N < T ? head_x.as<bf16>() : hf.as<bf16>();
    ce.w = lm_head.w;
    ce.targets = m.head_targets;
    ce.tokens = N, ce.hidden = H, ce.vocab = m.c.vocab_size;
    ce.grad_scale = static_cast<float>(grad_scale);
    // 4096-token chunks: a quarter of the fp32 dW passes over the vocabulary that 1024 take
    // (faster: docs/performance.md "Measured choices"), for 2 GB of bf16 logits (memory_plan.h's
    // chunk).
    ce.chunk_tokens = 4096;
    if (!fused_linear_cross_entropy_supported(ce)) {
        return absl::InvalidArgumentError("fused linear cross-entropy: unsupported shape");
    }
    const size_t ws = fused_linear_cross_entropy_workspace_bytes(ce);
    DT_ASSIGN_OR_RETURN(DeviceMemory work, m.dev.allocate(ws));
    DT_CUDA_RETURN_IF_ERROR(fused_linear_cross_entropy(ce, m.dev.blas(), work.get(), ws, s));
    if (N < T) {  // the head rows' gradient back in place, zero on the unlabeled rows
        DT_CUDA_RETURN_IF_ERROR(
            gather_rows(m.dhf.as<bf16>(), head_dx.as<bf16>(), m.head_position, T, H, s));
    }
    m.gradients_written(head_unit);  // the LM head's, by the loss's dW GEMMs
    // Wait through the source first: a sharded source polls NCCL, so a dead peer ends in an error
    // here rather than in a read-back into pageable memory that would block the host for good.
    DT_RETURN_IF_ERROR(m.source->synchronize());
    std::vector<float> losses(static_cast<size_t>(N));
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(losses.data(), row_losses.get(), sizeof(float) * N, cudaMemcpyDeviceToHost));
    for (float v : losses) r.loss_sum += v;
    return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LossResult> Qwen35GpuModel::forward(const PackedBatch& pb, double denominator) {
    Impl& m = *impl_;
    LossResult r;
    r.label_tokens = pb.label_tokens();
    // A batch without targets still runs when the step's denominator is given: a sharded rank
    // must join every collective of the step even when its share of the data is empty.
    if (r.label_tokens == 0 && denominator <= 0) {
        return absl::FailedPreconditionError("batch has no trained targets (every label is -100)");
    }
    if (m.lora) {  // the frozen base's scratch gradients: dropped, kept from growing
        DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.sink.get(), 0, m.sink.bytes(), m.s()));
        DT_RETURN_IF_ERROR(m.lora->reserve(pb.tokens()));  // the branch's x A^T, for the backward
    }
    DT_RETURN_IF_ERROR(upload_batch(m, pb));
    DT_ASSIGN_OR_RETURN(DeviceMemory emb, embed_tokens(m));
    const bf16 *resid = nullptr, *delta = nullptr;
    DT_RETURN_IF_ERROR(decoder_forward(m, emb.as<bf16>(), resid, delta));
    const double denom = denominator > 0 ? denominator : static_cast<double>(r.label_tokens);
    DT_RETURN_IF_ERROR(head_loss(m, resid, delta, 1.0 / denom, r));
    r.loss = r.label_tokens ? r.loss_sum / static_cast<double>(r.label_tokens) : 0.0;
    m.pending = true;
    return r;
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
