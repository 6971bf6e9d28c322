// The GPU engine: Qwen35GpuModel over FsdpGpuParams (FSDP over NCCL; world size 1 is one GPU),
// host collectives through the same communicator, and a progress watchdog.
#include "runtime/train/train_engine.h"

#if DELTATUNE_HAVE_CUDA
#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/device_context.h"
#include "runtime/dist/fsdp_gpu.h"
#include "runtime/dist/nccl_host_communicator.h"
#include "runtime/dist/progress_watchdog.h"
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

class GpuTrainEngine final : public TrainEngine {
  public:
    static absl::StatusOr<std::unique_ptr<GpuTrainEngine>> create(const HfModel& model,
                                                                  const GpuRankOptions& o) {
        std::unique_ptr<GpuTrainEngine> e(new GpuTrainEngine());
        if (o.watchdog) {
            e->watchdog_ = std::make_unique<ProgressWatchdog>(
                2 * o.timeout, exit_on_expiry(absl::StrCat("GPU rank ", o.rank), 1));
        }
        DT_ASSIGN_OR_RETURN(e->ctx_, DeviceContext::create(Device::cuda(o.device)));
        MemoryPlanInput plan_in;
        plan_in.world_size = o.world_size;
        plan_in.tokens_per_batch = o.tokens_per_batch;
        plan_in.sm_version = e->ctx_->sm_version();
        DT_ASSIGN_OR_RETURN(const Recompute recompute,
                            resolve_recompute(o.recompute, model.config, plan_in));
        e->recompute_ = recompute_name(recompute);
        NcclOptions n;
        n.rank = o.rank, n.world_size = o.world_size, n.device = o.device;
        n.store = o.store, n.store_dir = o.store_dir, n.prefix = o.prefix, n.timeout = o.timeout;
        DT_ASSIGN_OR_RETURN(e->nccl_, NcclCommunicator::create(n));
        e->beat();
        e->host_ = std::make_unique<NcclHostCommunicator>(*e->ctx_, *e->nccl_);
        DT_ASSIGN_OR_RETURN(e->fsdp_, FsdpGpuParams::create(*e->ctx_, *e->nccl_, model.config));
        DT_RETURN_IF_ERROR(e->fsdp_->load(model.params));
        DT_ASSIGN_OR_RETURN(
            e->net_, Qwen35GpuModel::create_with_source(*e->ctx_, model.config, e->fsdp_->layout(),
                                                        *e->fsdp_, recompute));
        e->beat();
        return e;
    }

    std::string name() const override { return "cuda-fsdp"; }
    std::string recompute() const override { return recompute_; }
    Communicator& comm() override { return *host_; }

    absl::Status begin_step() override {
        beat();
        return fsdp_->zero_grads();
    }

    absl::StatusOr<double> forward_backward(const PackedBatch& b, int64_t global_labels,
                                            bool last) override {
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

    absl::StatusOr<double> apply(const AdamWHyper& hyper, double max_grad_norm) override {
        DT_ASSIGN_OR_RETURN(double norm, fsdp_->step(hyper, adam_step_ + 1, max_grad_norm));
        ++adam_step_;
        beat();
        return norm;
    }

    absl::StatusOr<LossResult> evaluate(const PackedBatch& b) override {
        fsdp_->set_gradient_sync(true);
        DT_ASSIGN_OR_RETURN(LossResult r, net_->forward(b));
        DT_RETURN_IF_ERROR(net_->backward());  // releases the units the forward holds
        beat();
        return r;
    }

    ShardedStateIo state_io() override {
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

    absl::Status download(ParamSet& params) override {
        beat();
        absl::Status s = fsdp_->download(params);
        beat();
        return s;
    }

  private:
    GpuTrainEngine() = default;
    void beat() {
        if (watchdog_) watchdog_->beat();
    }

    // Declared first, destroyed last: it also guards the teardown of everything below.
    std::unique_ptr<ProgressWatchdog> watchdog_;
    std::unique_ptr<DeviceContext> ctx_;
    std::unique_ptr<NcclCommunicator> nccl_;
    std::unique_ptr<NcclHostCommunicator> host_;
    std::unique_ptr<FsdpGpuParams> fsdp_;
    std::unique_ptr<Qwen35GpuModel> net_;
    int64_t adam_step_ = 0;
    std::string recompute_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TrainEngine>> make_gpu_train_engine(const HfModel& model,
                                                                   const GpuRankOptions& options) {
    DT_ASSIGN_OR_RETURN(std::unique_ptr<GpuTrainEngine> e, GpuTrainEngine::create(model, options));
    return std::unique_ptr<TrainEngine>(std::move(e));
}

}  // namespace deltatune

#else   // !DELTATUNE_HAVE_CUDA

namespace deltatune {

absl::StatusOr<std::unique_ptr<TrainEngine>> make_gpu_train_engine(const HfModel&,
                                                                   const GpuRankOptions&) {
    return absl::FailedPreconditionError(
        "GPU training needs a CUDA build (DELTATUNE_CUDA=OFF or no nvcc)");
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
