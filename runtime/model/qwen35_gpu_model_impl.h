// Qwen35GpuModel's device state, shared by qwen35_gpu_model.cc (the step) and
// qwen35_gpu_model_flat.cc (the single-device parameter source, gradients and AdamW).
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <memory>
#include <vector>

#include "runtime/model/gpu_blocks.h"
#include "runtime/model/gpu_lora.h"
#include "runtime/model/gpu_param_layout.h"
#include "runtime/model/qwen35_gpu_model.h"

namespace deltatune {

struct LayerActs {
    DeviceMemory x, rstd1, a;    // layer input (residual stream) (T, H) bf16; (T) fp32; normed
    DeviceMemory mid, rstd2, m;  // after the block's residual add; (T) fp32; post-normed
    DeviceMemory mlp_out;        // (T, H) bf16, consumed by the next layer's fused norm
    GpuMlpActs mlp;
    GpuAttentionActs attn;
    GpuGdnActs gdn;
};

// ParamSet indices of one layer's parameters (-1 where the layer type has none).
struct LayerParamIndex {
    LayerType type;
    int input_norm = -1, post_norm = -1, mlp_gate = -1, mlp_up = -1, mlp_down = -1;
    int in_proj_qkv = -1, in_proj_z = -1, in_proj_b = -1, in_proj_a = -1, conv_w = -1, A_log = -1,
        dt_bias = -1, gdn_norm = -1, out_proj = -1;
    int q_proj = -1, k_proj = -1, v_proj = -1, o_proj = -1, q_norm = -1, k_norm = -1;
};

// The single-device source: every unit lives in the model's flat buffers (unit segments back to
// back); acquire returns pointers into them and release does nothing.
class FlatParamSource final : public GpuParamSource {
  public:
    FlatParamSource(const GpuParamLayout& layout, const bf16* half, const float* master,
                    float* grad, cudaStream_t compute);
    absl::StatusOr<GpuUnitPtrs> acquire(int unit, Phase phase, bool grads) override;
    absl::Status release(int, Phase) override { return absl::OkStatus(); }
    absl::Status synchronize() override;
    int64_t unit_begin(int unit) const { return begin_[static_cast<size_t>(unit)]; }

  private:
    std::vector<int64_t> begin_;
    const bf16* half_;
    const float* master_;
    float* grad_;
    cudaStream_t compute_;
};

struct Qwen35GpuModel::Impl {
    DeviceContext& dev;
    Qwen35Config c;
    Recompute recompute;
    int64_t keep_last = 0;  // with kLayer: the last layers that keep their activations instead
    bool recomputes(int64_t l) const {
        return recompute == Recompute::kLayer && l < c.num_layers - keep_last;
    }
    GpuParamLayout layout;
    std::vector<int64_t> offset, numel;  // per parameter, elements into the flat buffers
    int64_t total = 0;
    DeviceMemory master, half, grad;  // fp32, bf16, fp32 flat (single-device source only)
    std::unique_ptr<FlatParamSource> flat;
    GpuParamSource* source = nullptr;  // `flat` or an outside (sharded) source
    int embed_idx = -1, final_norm_idx = -1, lm_head_idx = -1;
    std::vector<LayerParamIndex> layer_idx;
    // Per parameter: its gradient is written by a dW GEMM (the projections), and, for those, the
    // gradient holds nothing yet this step: zero_grads (single-device) leaves them to their GEMM,
    // which then writes instead of adding (GpuParam::fresh); the layer's backward clears it.
    std::vector<char> gemm_grad, fresh;
    // The pending batch and what backward needs.
    // ids (T) | targets (T) | positions (T) | cu_seqlens (D + 1) | ids sorted (T) | their
    // positions (T) (embedding_id_order)
    DeviceMemory batch_ints;
    // Page-locked staging for batch_ints: a copy from pageable memory may wait for the stream,
    // which must never happen while a collective could be stuck behind it.
    int32_t* staging = nullptr;
    size_t staging_count = 0;
    GpuBatch batch;
    GpuAttentionSchedule attention_schedule;  // batch.attention_schedule points here
    const int32_t* ids = nullptr;
    const int32_t* ids_sorted = nullptr;
    const int32_t* id_positions_sorted = nullptr;
    // The LM head's rows (runtime/batch/label_rows.h): a batch with enough rows unlabeled stages
    // its labeled rows (head_count of them), their targets and each batch row's place among them.
    bool label_only_head = true;
    bool fp8_projections = false;  // set_fp8_projections
    int64_t head_count = 0;        // the batch's tokens when the head runs on every row
    const int32_t* head_rows = nullptr;
    const int32_t* head_targets = nullptr;
    const int32_t* head_position = nullptr;
    std::vector<LayerActs> acts;
    DeviceMemory xf, rstdf, dhf;
    GpuUnitPtrs head;  // the head unit, acquired in the forward, released in the backward
    bool pending = false;
    // LoRA (qwen35_gpu_model_lora.cc): the adapter, and the frozen base's scratch gradients.
    // Only the norms' and GDN weights' kernels form a frozen gradient (into `sink`, dropped);
    // per parameter its offset there, -1 for those with none (projections, embedding, head).
    GpuLoraAdapters* lora = nullptr;
    DeviceMemory sink;
    std::vector<int64_t> sink_offset;
    // The optimizer's moments (m | v, fp32 flat), allocated by the store's first hand-over.
    DeviceMemory moments;
    std::unique_ptr<GpuParamStore> store;  // param_store()

    Impl(DeviceContext& d, const Qwen35Config& cfg, Recompute r) : dev(d), c(cfg), recompute(r) {}
    ~Impl();
    cudaStream_t s() const { return dev.compute_stream(); }
    GpuCtx ctx() const { return GpuCtx{dev, c, batch}; }

    GpuParam param(int index, const GpuUnitPtrs& u) const;
    GpuLayer bind_layer(int64_t l, const GpuUnitPtrs& u) const;
    void attach_lora_pairs(int64_t l, GpuLayer& g) const;  // the adapter's pairs of layer l
    absl::Status layer_forward(int64_t l, const GpuLayer& w, const bf16* resid, const bf16* delta,
                               bool keep_for_backward);
    absl::Status layer_backward(int64_t l, DeviceMemory& g);
    // The dW GEMMs of `unit` have written their gradients: later micro-batches add to them.
    void gradients_written(int unit);
    absl::Status require_flat(const char* what) const;
    absl::Status require_trained_base(const char* what) const;  // flat, and no adapter
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
