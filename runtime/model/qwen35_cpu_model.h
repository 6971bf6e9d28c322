// The Qwen3.5 model on the fp32 CPU reference path: forward and backward as mirror images over
// one packed 1D batch. This is the oracle the GPU path is tested against and what CI trains.
// Loss = sum of token cross-entropies over trained targets / their count (transformers' mean).
// Gradients are accumulated (+=) into a ParamSet shaped like the parameters; for tied
// embeddings the lm_head contribution lands in model.embed_tokens.weight.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/batch/label_rows.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/model/cpu_blocks.h"
#include "runtime/model/cpu_param_source.h"
#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

struct LossResult {
    double loss = 0;           // loss_sum / label_tokens
    double loss_sum = 0;       // sum of per-token cross-entropies
    int64_t label_tokens = 0;  // trained targets in the batch
};

class Qwen35CpuModel {
  public:
    // `params` must outlive the model; the model reads it and never changes it.
    Qwen35CpuModel(const Qwen35Config& config, ParamSet& params);

    // Runs the forward pass, keeping what backward needs. FailedPrecondition when the batch has
    // no trained targets (the mean would be 0/0).
    absl::StatusOr<LossResult> forward(const PackedBatch& batch);
    // Gradient of the last forward's loss, accumulated into `grads` (+=). Consumes the saved
    // activations.
    absl::Status backward(ParamSet& grads);
    // Gradient of loss_sum * grad_scale instead: gradient accumulation over micro-batches uses
    // grad_scale = 1 / (trained targets of all micro-batches of the step).
    absl::Status backward(ParamSet& grads, double grad_scale);

    // A LoRA adapter (model/lora.h): forward and backward add each pair's branch, and backward
    // accumulates the pairs' gradients into `adapter_grads` (shaped like `adapters`). Both must
    // outlive the model.
    // The base is then frozen: backward forms none of its projections', embedding's or LM head's
    // gradients (nearly all of its size), only the small ones the blocks compute on the way.
    void attach_adapter(ParamSet& adapters, ParamSet& adapter_grads, float scale);
    // The base gradients backward needs under an adapter: every tensor of `params`' shapes, but
    // only those backward writes are touched (zeroed); the frozen weights' stay unwritten
    // address space. zero_written() clears those for the next micro-batch.
    struct FrozenBaseGrads {
        ParamSet set;
        std::vector<size_t> written;  // indices into set.all()
        void zero_written();
    };
    static FrozenBaseGrads frozen_base_grads(const Qwen35Config& config, const ParamSet& params);

    // A sharded store (outliving the model) that makes each unit's values, and in backward its
    // gradients, present only while the model computes with it. Without one every parameter is
    // present throughout and gradients accumulate into backward's `grads` as they are.
    void set_param_source(CpuParamSource* source) { source_ = source; }

    // The LM head and loss run on the labeled rows alone (runtime/batch/label_rows.h), the same
    // loss and gradients as on every row; false runs every row (tests compare the two).
    void set_label_only_head(bool on) { label_only_head_ = on; }

    // Final hidden states (T, H) after the last norm, and the full logits (T, V), for tests.
    absl::StatusOr<Buf> hidden_states(const PackedBatch& batch);
    absl::StatusOr<Buf> logits(const PackedBatch& batch);

  private:
    struct LayerActs {
        Buf x;    // layer input (T, H)
        Buf mid;  // after the attention residual add (T, H)
        GdnBlockActs gdn;
        AttentionBlockActs attn;
        MlpBlockActs mlp;
    };

    // Embedding, layers and final norm; leaves the head unit acquired (the caller releases it).
    absl::Status run_layers(const PackedBatch& batch, Buf& x);
    // The rows the LM head runs on: the labeled rows gathered from the final norm's output, or
    // every row of it.
    struct HeadRows {
        std::optional<LabelRows> labeled;
        Buf gathered;  // (labeled rows, H) when `labeled`
        const float* all = nullptr;
        const int32_t* all_targets = nullptr;
        int64_t all_count = 0;
        const float* x() const { return labeled ? gathered.data() : all; }
        const int32_t* targets() const { return labeled ? labeled->targets.data() : all_targets; }
        int64_t count() const {
            return labeled ? static_cast<int64_t>(labeled->rows.size()) : all_count;
        }
    };
    HeadRows head_rows(const PackedBatch& batch) const;
    absl::Status head_backward(const PackedBatch& batch, const ModelView& g, float grad_scale,
                               Buf& dx);
    BatchMeta meta(const PackedBatch& batch) const;
    absl::Status acquire(int unit, CpuParamSource::Phase phase);
    absl::Status release(int unit, CpuParamSource::Phase phase);
    int head_unit() const { return cpu_head_unit(config_.num_layers); }

    const Qwen35Config& config_;
    ParamSet& params_;
    ModelView view_;
    bool tied_ = false;                   // the embedding is the LM head (in the head unit)
    CpuParamSource* source_ = nullptr;    // null: every parameter present
    const PackedBatch* batch_ = nullptr;  // the batch of the pending backward
    ParamSet* adapter_grads_ = nullptr;
    float lora_scale_ = 0;
    std::vector<LayerActs> acts_;
    Buf final_x_, final_normed_, final_rstd_;
    int64_t label_tokens_ = 0;
    bool label_only_head_ = true;
};

}  // namespace deltatune
