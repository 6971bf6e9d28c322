// The Qwen3.5 model on one CUDA device over a packed 1D batch: bf16 parameters (with fp32
// masters and fp32 gradients on the device) and activations, fp32 GDN core, norms, softmax and
// loss; the fused kernels of kernels/ and cuBLASLt GEMMs (see kernel_registry.h for which
// implementation each op uses). Forward and backward mirror Qwen35CpuModel; the CPU model is the
// oracle (loss rel. error < 1e-2, gradient cosine > 0.99). The model never calls a collective:
// it takes its parameters unit by unit from a GpuParamSource (gpu_param_layout.h), its own flat
// buffers on one device or runtime/distributed's sharded source (fsdp_gpu.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/device/device_context.h"
#include "runtime/model/gpu_param_layout.h"
#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"
#include "runtime/model/qwen35_cpu_model.h"
#include "runtime/model/recompute.h"

namespace deltatune {

class GpuLoraAdapters;  // gpu_lora.h
class GpuParamStore;    // gpu_param_store.h

class Qwen35GpuModel {
  public:
    // Uploads `params` (fp32 host values) as fp32 masters and bf16 copies; gradients start at
    // zero. `ctx` must be a CUDA context and outlive the model. Fails with FailedPrecondition on
    // a CPU context or a CPU-only build.
    static absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> create(DeviceContext& ctx,
                                                                  const Qwen35Config& config,
                                                                  ParamSet& params,
                                                                  Recompute recompute);
    // Same model with random values generated on the device (kernels/tensor/init_fill.h; the
    // distributions of init_qwen35_params, not its values): nothing of size goes through the
    // host. For benchmarks of models too large to stage on the host.
    static absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> create_random(DeviceContext& ctx,
                                                                         const Qwen35Config& config,
                                                                         Recompute recompute,
                                                                         uint64_t seed);
#if DELTATUNE_HAVE_CUDA
    // A model whose parameters, gradients and optimizer live in `source` (a sharded source from
    // runtime/distributed), laid out as `layout` (make_gpu_param_layout over
    // make_qwen35_params(config, tied)). zero_grads, download_grads and param_store are the
    // source's then, and fail here with FailedPrecondition. `source` must outlive the model.
    static absl::StatusOr<std::unique_ptr<Qwen35GpuModel>> create_with_source(
        DeviceContext& ctx, const Qwen35Config& config, const GpuParamLayout& layout,
        GpuParamSource& source, Recompute recompute);
#endif
    ~Qwen35GpuModel();

    // Forward over the batch, and the LM head's fused loss gradient: the lm_head (or tied
    // embedding) gradient is accumulated here already, the rest in backward(). The loss is the
    // mean over trained targets; the gradient is of that mean, or of loss_sum / denominator when
    // `denominator` > 0 (the trained targets of a whole step: several micro-batches, or ranks).
    // A batch without trained targets is FailedPrecondition unless `denominator` > 0 (then its
    // loss and gradients are zero, and the step's collectives still run).
    absl::StatusOr<LossResult> forward(const PackedBatch& batch, double denominator = 0);
    // Gradients of the last forward's loss, accumulated (+=) into the device gradients.
    absl::Status backward();

    absl::Status zero_grads();
    // fp32 gradients into `grads` (same names and shapes as the parameters), overwritten.
    absl::Status download_grads(ParamSet& grads) const;
    // fp32 master weights into `params` (same names and shapes), overwritten.
    absl::Status download_params(ParamSet& params) const;
    int64_t peak_device_bytes() const;
    // The LM head and loss on the labeled rows alone where a batch has at least 1/64 of its rows
    // unlabeled (runtime/batch/label_rows.h; the default), else on every row: the same loss and
    // gradients within the GEMMs' rounding. false: every row always (tests compare the two).
    void set_label_only_head(bool on);
    // The large projections (attention q/k/v/o, the MLP, the Gated DeltaNet's qkv, z and out;
    // not its 48-wide gate inputs a and b) run their three GEMMs in FP8 where the GPU and their
    // shapes allow (runtime/device/linear_fp8.h); embeddings, LM head, attention and GDN cores,
    // norms, masters, optimizer and gradient reduction stay as they are. Off by default.
    void set_fp8_projections(bool on);

#if DELTATUNE_HAVE_CUDA
    // With per-layer recompute: the last `layers` layers keep their activations from the forward
    // instead (the memory planner's choose_kept_layers says how many fit).
    void keep_activations_of_last(int64_t layers);
    int64_t kept_layers() const;  // layers whose activations the forward keeps
#endif

#if DELTATUNE_HAVE_CUDA
    // For a source that hands out every unit whole (FSDP at world size 1): marks the
    // projections' gradients, whose dW GEMMs then write their first gradient instead of adding
    // to a zeroed one (as zero_grads does on the single-device model), and returns the mask by
    // parameter index; the caller zeroes every other gradient.
    const std::vector<char>& mark_gemm_gradients_fresh();
    // LoRA (model/lora.h): the base freezes (no gradient reaches it: the projections, embedding
    // and LM head form none, the norms' and GDN weights' go to a scratch that is dropped) and
    // every projection with a pair in `adapters` gains its branch, whose gradients accumulate
    // in `adapters`. zero_grads, download_grads and param_store then refuse: the adapter trains
    // (GpuLoraAdapters is the optimizer's store). `adapters` must outlive the model.
    absl::Status attach_lora(GpuLoraAdapters& adapters);
    // The marked parameters no GEMM has written since (their gradients hold the last step's
    // values: zero them before reading); clears the marks.
    std::vector<size_t> take_unwritten_fresh_gradients();
    // The single-device model's own parameters as the optimizer's store (runtime/optim): a
    // tensor per parameter, moments kept on the device from the first hand-over. Owned by the
    // model.
    absl::StatusOr<GpuParamStore*> param_store();
#endif

    struct Impl;  // the device state (qwen35_gpu_model.cc)

  private:
    explicit Qwen35GpuModel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace deltatune
