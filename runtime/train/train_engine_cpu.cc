// The CPU reference engines: Qwen35CpuModel training the parameters sharded over the ranks
// (FsdpCpuParams) or, with a LoRA adapter, only the adapter (the base frozen).
#include <cstring>

#include "runtime/base/status_macros.h"
#include "runtime/distributed/fsdp_cpu.h"
#include "runtime/optim/cpu_update.h"
#include "runtime/optim/sharded_optimizer.h"
#include "runtime/train/train_engine.h"

namespace deltatune {

namespace {

// Full fine-tuning: the parameters, gradients and moments sharded over the ranks (FsdpCpuParams),
// the model gathering one unit at a time.
class CpuFsdpEngine final : public TrainEngine {
  public:
    static absl::StatusOr<std::unique_ptr<TrainEngine>> create(HfModel& model, Communicator& comm) {
        std::unique_ptr<CpuFsdpEngine> e(new CpuFsdpEngine(model, comm));
        DT_ASSIGN_OR_RETURN(e->fsdp_, FsdpCpuParams::create(model, e->grads_, comm));
        e->net_.set_param_source(e->fsdp_.get());
        return e;
    }

    std::string name() const override { return "cpu"; }
    Communicator& comm() override { return comm_; }
    absl::Status begin_step() override { return absl::OkStatus(); }

    absl::StatusOr<double> forward_backward(const PackedBatch& b, int64_t global_labels,
                                            bool last) override {
        fsdp_->begin_micro_batch(last);
        if (b.label_tokens() == 0) {  // nothing to train, but the ranks' collectives
            DT_RETURN_IF_ERROR(fsdp_->join_without_batch());
            return 0.0;
        }
        DT_ASSIGN_OR_RETURN(LossResult r, net_.forward(b));
        DT_RETURN_IF_ERROR(net_.backward(grads_, 1.0 / static_cast<double>(global_labels)));
        return r.loss_sum;
    }

    absl::StatusOr<double> apply(const AdamWHyper& hyper, double max_grad_norm) override {
        return fsdp_cpu_step(*fsdp_, hyper, max_grad_norm);
    }

    absl::StatusOr<LossResult> evaluate(const PackedBatch& b) override { return net_.forward(b); }

    ShardedStateIo state_io() override {
        ShardedStateIo io;
        io.group_sizes = fsdp_->group_sizes();
        io.adam_step = fsdp_->adam_step();
        io.save_shard = [this](const std::string& path) { return fsdp_->save_shard(path); };
        io.load = [this](const std::vector<std::string>& files, int64_t adam_step) {
            DT_RETURN_IF_ERROR(fsdp_->load(files));
            fsdp_->set_adam_step(adam_step);
            return absl::OkStatus();
        };
        return io;
    }

    absl::Status download(ParamSet& params) override {
        DT_RETURN_IF_ERROR(fsdp_->gather_all());
        if (&params == &params_) return absl::OkStatus();
        for (size_t i = 0; i < params.all().size(); ++i) {
            const Tensor& from = params_.all()[i].value;
            std::memcpy(params.all()[i].value.raw_data(), from.raw_data(), from.nbytes());
        }
        return absl::OkStatus();
    }

    ParamBytes param_bytes(const ParamSet& layout) override {
        if (&layout != &params_) {
            return [](size_t, const SafetensorsWrite&) {
                return absl::FailedPreconditionError("param_bytes: not the model's parameters");
            };
        }
        return fsdp_->param_bytes();
    }

  private:
    CpuFsdpEngine(HfModel& model, Communicator& comm)
        : comm_(comm),
          params_(model.params),
          net_(model.config, model.params),
          // Untouched address space beyond world size 1: a unit's pages exist only while the
          // backward computes it.
          grads_(gradient_set(model.params, comm.world_size() == 1)) {}

    static ParamSet gradient_set(const ParamSet& params, bool zero_fill) {
        ParamSet out;
        for (const NamedParam& p : params.all()) {
            out.add(p.name, p.value.shape(), p.stored_dtype, zero_fill);
        }
        return out;
    }

    Communicator& comm_;
    ParamSet& params_;
    Qwen35CpuModel net_;
    ParamSet grads_;
    std::unique_ptr<FsdpCpuParams> fsdp_;
};

// LoRA: the base frozen and whole on every rank, the adapter's tensors trained by
// ShardedOptimizer (fp64 gradient accumulation).
class CpuLoraEngine final : public TrainEngine {
  public:
    CpuLoraEngine(HfModel& model, Communicator& comm, ParamSet& adapters, float lora_scale)
        : comm_(comm),
          adapters_(adapters),
          optimizer_(ShardedOptimizer::create(adapters, &comm)),
          net_(model.config, model.params),
          grads_(adapters.zeros_like()),
          base_grads_(Qwen35CpuModel::frozen_base_grads(model.config, model.params)) {
        net_.attach_adapter(adapters, grads_, lora_scale);
    }

    std::string name() const override { return "cpu"; }
    Communicator& comm() override { return comm_; }
    absl::Status begin_step() override { return absl::OkStatus(); }  // step() clears

    absl::StatusOr<double> forward_backward(const PackedBatch& b, int64_t global_labels,
                                            bool) override {
        if (b.label_tokens() == 0) return 0.0;  // no collective here: nothing to join
        // A rank's second micro-batch of a step: the first one's gradients go to the fp64
        // accumulators before their memory is reused (one micro-batch needs no copy at all).
        if (pending_) optimizer_.accumulate(grads_);
        pending_ = true;
        for (auto& g : grads_.all()) g.value.fill_zero();
        DT_ASSIGN_OR_RETURN(LossResult r, net_.forward(b));
        // The blocks still form the frozen base's small gradients on the way: a scratch set.
        base_grads_.zero_written();
        DT_RETURN_IF_ERROR(
            net_.backward(base_grads_.set, 1.0 / static_cast<double>(global_labels)));
        return r.loss_sum;
    }

    absl::StatusOr<double> apply(const AdamWHyper& hyper, double max_grad_norm) override {
        ParamSet* last = pending_ ? &grads_ : nullptr;
        pending_ = false;
        return optimizer_.step(last, hyper, max_grad_norm);
    }

    absl::StatusOr<LossResult> evaluate(const PackedBatch& b) override { return net_.forward(b); }

    ShardedStateIo state_io() override { return optimizer_.state_io(); }

    // The adapter is trained in place; the base is unchanged.
    absl::Status download(ParamSet&) override { return absl::OkStatus(); }

    ParamBytes param_bytes(const ParamSet&) override {
        return [](size_t, const SafetensorsWrite&) {
            return absl::FailedPreconditionError("param_bytes: a LoRA job exports its adapter");
        };
    }

  private:
    Communicator& comm_;
    ParamSet& adapters_;
    ShardedOptimizer optimizer_;
    Qwen35CpuModel net_;
    ParamSet grads_;  // of the adapter
    Qwen35CpuModel::FrozenBaseGrads base_grads_;
    bool pending_ = false;  // grads_ hold a micro-batch the optimizer has not taken yet
};

}  // namespace

absl::StatusOr<std::unique_ptr<TrainEngine>> make_cpu_train_engine(HfModel& model,
                                                                   Communicator& comm,
                                                                   ParamSet* adapters,
                                                                   float lora_scale) {
    if (adapters) {
        if (!model.materialized) DT_RETURN_IF_ERROR(materialize_weights(model));
        return std::make_unique<CpuLoraEngine>(model, comm, *adapters, lora_scale);
    }
    return CpuFsdpEngine::create(model, comm);
}

}  // namespace deltatune
