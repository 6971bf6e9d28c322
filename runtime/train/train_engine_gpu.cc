// The GPU engine: Qwen35GpuModel over FsdpGpuParams (FSDP over NCCL; world size 1 is one GPU),
// host collectives through the same communicator, and a progress watchdog.
#include "runtime/train/train_engine.h"

#if DELTATUNE_HAVE_CUDA
#include "runtime/train/train_engine_gpu.h"

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/device_context.h"
#include "runtime/distributed/fsdp_gpu.h"
#include "runtime/distributed/nccl_host_communicator.h"
#include "runtime/distributed/progress_watchdog.h"
#include "runtime/model/model_flops.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/train/memory_plan.h"

namespace deltatune {

namespace {

// A batch of `tokens` tokens that trains nothing: a rank whose share of a micro-step is empty
// runs it so that it joins the step's gathers and reduce-scatters.
PackedBatch untrained_batch(int64_t tokens) {
    PackedBatch b;
    b.input_ids.assign(static_cast<size_t>(tokens), 0);
    b.targets.assign(static_cast<size_t>(tokens), -100);
    for (int64_t t = 0; t < tokens; ++t) b.position_ids.push_back(static_cast<int32_t>(t));
    b.cu_seqlens = {0, static_cast<int32_t>(tokens)};
    return b;
}

}  // namespace

GpuTrainEngine::GpuTrainEngine() = default;
GpuTrainEngine::~GpuTrainEngine() = default;

// Everything but the parameters' values: watchdog, device, recompute policy, NCCL, the shards.
absl::StatusOr<std::unique_ptr<GpuTrainEngine>> GpuTrainEngine::prepare(const Qwen35Config& config,
                                                                        const GpuRankOptions& o,
                                                                        int64_t adapter_params) {
    std::unique_ptr<GpuTrainEngine> e(new GpuTrainEngine());
    if (o.watchdog) {
        e->watchdog_ = std::make_unique<ProgressWatchdog>(
            2 * o.timeout, exit_on_expiry(absl::StrCat("GPU rank ", o.rank), 1));
    }
    DT_ASSIGN_OR_RETURN(e->ctx_, DeviceContext::create(Device::cuda(o.device)));
    MemoryPlanInput plan_in;
    plan_in.world_size = o.world_size;
    plan_in.tokens_per_batch = o.tokens_per_batch;
    e->tokens_per_batch_ = o.tokens_per_batch;
    e->fp8_projections_ = o.fp8_projections;
    plan_in.gpu = e->ctx_->gpu();
    plan_in.attention_core = e->ctx_->attention_core();
    plan_in.adapter_parameters = adapter_params;
    plan_in.fp8_projections = o.fp8_projections;
    DT_ASSIGN_OR_RETURN(e->recompute_policy_, resolve_recompute(o.recompute, config, plan_in));
    DT_ASSIGN_OR_RETURN(e->kept_layers_,
                        resolve_kept_layers(o.recompute, e->recompute_policy_, config, plan_in));
    plan_in.recompute = e->recompute_policy_;
    plan_in.kept_layers = e->kept_layers_;
    e->plan_ = plan_memory(config, plan_in);
    NcclOptions n;
    n.rank = o.rank, n.world_size = o.world_size, n.device = o.device;
    n.store = o.store, n.store_dir = o.store_dir, n.prefix = o.prefix, n.timeout = o.timeout;
    DT_ASSIGN_OR_RETURN(e->nccl_, NcclCommunicator::create(n));
    e->beat();
    e->host_ = std::make_unique<NcclHostCommunicator>(*e->ctx_, *e->nccl_);
    DT_ASSIGN_OR_RETURN(e->fsdp_, FsdpGpuParams::create(*e->ctx_, *e->nccl_, config,
                                                        /*frozen=*/adapter_params > 0));
    return e;
}

absl::Status GpuTrainEngine::attach_model(const Qwen35Config& config, ParamSet* adapters,
                                          float lora_scale) {
    DT_ASSIGN_OR_RETURN(net_, Qwen35GpuModel::create_with_source(*ctx_, config, fsdp_->layout(),
                                                                 *fsdp_, recompute_policy_));
    net_->keep_activations_of_last(kept_layers_);
    net_->set_fp8_projections(fp8_projections_);
    if (adapters) {
        DT_ASSIGN_OR_RETURN(lora_, GpuLoraAdapters::create(*ctx_, config, *adapters, lora_scale));
        DT_RETURN_IF_ERROR(lora_->reserve(tokens_per_batch_));  // no growth inside a step
        DT_RETURN_IF_ERROR(net_->attach_lora(*lora_));
        adapters_ = adapters;
    }
    GpuParamStore& trained = lora_ ? static_cast<GpuParamStore&>(*lora_) : *fsdp_;
    DT_ASSIGN_OR_RETURN(optimizer_, GpuOptimizer::create(*ctx_, trained, nccl_.get()));
    beat();
    return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuTrainEngine>> GpuTrainEngine::create(const HfModel& model,
                                                                       const GpuRankOptions& o,
                                                                       ParamSet* adapters,
                                                                       float lora_scale) {
    DT_ASSIGN_OR_RETURN(std::unique_ptr<GpuTrainEngine> e,
                        prepare(model.config, o, adapters ? adapters->numel() : 0));
    if (model.materialized) {
        DT_RETURN_IF_ERROR(e->fsdp_->load(model.params));
    } else {
        DT_RETURN_IF_ERROR(e->fsdp_->load_from(*model.weights));
    }
    DT_RETURN_IF_ERROR(e->attach_model(model.config, adapters, lora_scale));
    return e;
}

absl::StatusOr<std::unique_ptr<GpuTrainEngine>> GpuTrainEngine::create_random(
    const Qwen35Config& config, const GpuRankOptions& o, uint64_t seed, ParamSet* adapters,
    float lora_scale) {
    DT_ASSIGN_OR_RETURN(std::unique_ptr<GpuTrainEngine> e,
                        prepare(config, o, adapters ? adapters->numel() : 0));
    DT_RETURN_IF_ERROR(e->fsdp_->init_random(seed));
    DT_RETURN_IF_ERROR(e->attach_model(config, adapters, lora_scale));
    return e;
}

TrainEngine::DeviceFigures GpuTrainEngine::device_figures() const {
    return {dense_bf16_peak_flops(ctx_->sm_version()), net_->peak_device_bytes(), plan_.peak_bytes};
}

absl::Status GpuTrainEngine::begin_step() {
    beat();
    if (lora_) return lora_->zero_grads();
    if (nccl_->world_size() > 1) return fsdp_->zero_grads();
    // One rank holds every unit whole: the projections' dW GEMMs write their first gradient
    // (no zeroing before, no read of C in the GEMM); every other gradient is zeroed.
    return fsdp_->zero_grads_except(net_->mark_gemm_gradients_fresh());
}

absl::StatusOr<double> GpuTrainEngine::forward_backward(const PackedBatch& b, int64_t global_labels,
                                                        bool last) {
    fsdp_->set_gradient_sync(last);
    const double denominator = static_cast<double>(std::max<int64_t>(global_labels, 1));
    const PackedBatch* batch = &b;
    PackedBatch filler;
    if (b.tokens() == 0) batch = &(filler = untrained_batch(16));
    DT_ASSIGN_OR_RETURN(LossResult r, net_->forward(*batch, denominator));
    DT_RETURN_IF_ERROR(net_->backward());
    beat();
    return r.loss_sum;
}

absl::StatusOr<double> GpuTrainEngine::apply(const AdamWHyper& hyper, double max_grad_norm) {
    if (!lora_ && nccl_->world_size() == 1) {  // a marked gradient no GEMM wrote still holds
        // the last step's values
        DT_RETURN_IF_ERROR(fsdp_->zero_param_grads(net_->take_unwritten_fresh_gradients()));
    }
    DT_ASSIGN_OR_RETURN(double norm, optimizer_->step(hyper, adam_step_ + 1, max_grad_norm));
    ++adam_step_;
    beat();
    return norm;
}

absl::StatusOr<LossResult> GpuTrainEngine::evaluate(const PackedBatch& b) {
    fsdp_->set_gradient_sync(true);
    DT_ASSIGN_OR_RETURN(LossResult r, net_->forward(b));
    DT_RETURN_IF_ERROR(net_->backward());  // releases the units the forward holds
    beat();
    return r;
}

ShardedStateIo GpuTrainEngine::state_io() {
    if (lora_) return lora_state_io();
    ShardedStateIo io;
    io.group_sizes = fsdp_->group_sizes();
    io.adam_step = adam_step_;
    io.save_shard = [this](const std::string& path) {
        beat();
        absl::Status s = fsdp_->save_shard(path);
        beat();
        return s;
    };
    io.load = [this](const std::vector<std::string>& files, int64_t adam_step) {
        beat();
        DT_RETURN_IF_ERROR(fsdp_->load_shards(files));
        adam_step_ = adam_step;
        beat();
        return absl::OkStatus();
    };
    return io;
}

absl::Status GpuTrainEngine::download(ParamSet& params) {
    beat();
    if (lora_) return lora_->download(*adapters_);  // the base is frozen: as loaded
    absl::Status s = fsdp_->download(params);
    beat();
    return s;
}

ParamBytes GpuTrainEngine::param_bytes(const ParamSet& layout) {
    auto cursor = std::make_shared<FsdpGpuParams::ExportCursor>();
    return [this, cursor, &layout](size_t i, const SafetensorsWrite& write) {
        beat();
        if (lora_) return absl::FailedPreconditionError("param_bytes: the base is frozen");
        return fsdp_->write_param(*cursor, i, layout.all()[i].stored_dtype, write);
    };
}

std::string GpuTrainEngine::recompute() const {
    return recompute_name(recompute_policy_);
}

void GpuTrainEngine::beat() {
    if (watchdog_) watchdog_->beat();
}

absl::StatusOr<std::unique_ptr<TrainEngine>> make_gpu_train_engine(const HfModel& model,
                                                                   const GpuRankOptions& options,
                                                                   ParamSet* adapters,
                                                                   float lora_scale) {
    DT_ASSIGN_OR_RETURN(std::unique_ptr<GpuTrainEngine> e,
                        GpuTrainEngine::create(model, options, adapters, lora_scale));
    return std::unique_ptr<TrainEngine>(std::move(e));
}

}  // namespace deltatune

#else   // !DELTATUNE_HAVE_CUDA

namespace deltatune {

absl::StatusOr<std::unique_ptr<TrainEngine>> make_gpu_train_engine(const HfModel&,
                                                                   const GpuRankOptions&, ParamSet*,
                                                                   float) {
    return absl::FailedPreconditionError(
        "GPU training needs a CUDA build (DELTATUNE_CUDA=OFF or no nvcc)");
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
