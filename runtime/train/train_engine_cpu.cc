// The CPU reference engine: Qwen35CpuModel and ShardedOptimizer (fp64 gradient accumulation),
// training the parameters or, with a LoRA adapter, only the adapter (the base frozen).
#include <cstring>

#include "runtime/base/status_macros.h"
#include "runtime/train/sharded_optimizer.h"
#include "runtime/train/train_engine.h"

namespace deltatune {

namespace {

class CpuTrainEngine final : public TrainEngine {
  public:
    // `adapters` null: full fine-tuning of model.params; else the adapter's tensors are what
    // trains (model.params frozen).
    CpuTrainEngine(HfModel& model, Communicator& comm, ParamSet* adapters, float lora_scale)
        : comm_(comm),
          trained_(adapters ? *adapters : model.params),
          optimizer_(ShardedOptimizer::create(trained_, &comm)),
          net_(model.config, model.params),
          grads_(trained_.zeros_like()) {
        if (adapters) {
            frozen_ = &model.params;
            base_grads_ = Qwen35CpuModel::frozen_base_grads(model.config, model.params);
            net_.attach_adapter(*adapters, grads_, lora_scale);
        }
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
        // With an adapter the blocks still form the frozen base's gradients: a scratch set.
        ParamSet& into = frozen_ ? base_grads_.set : grads_;
        base_grads_.zero_written();
        DT_RETURN_IF_ERROR(net_.backward(into, 1.0 / static_cast<double>(global_labels)));
        return r.loss_sum;
    }

    absl::StatusOr<double> apply(const AdamWHyper& hyper, double max_grad_norm) override {
        ParamSet* last = pending_ ? &grads_ : nullptr;
        pending_ = false;
        return optimizer_.step(last, hyper, max_grad_norm);
    }

    absl::StatusOr<LossResult> evaluate(const PackedBatch& b) override { return net_.forward(b); }

    ShardedStateIo state_io() override {
        ShardedStateIo io;
        io.group_sizes = optimizer_.group_sizes();
        io.adam_step = optimizer_.adam_step();
        io.save_shard = [this](const std::string& path) { return optimizer_.save_shard(path); };
        io.load = [this](const std::vector<std::string>& files, int64_t adam_step) {
            DT_RETURN_IF_ERROR(optimizer_.load(files));
            optimizer_.set_adam_step(adam_step);
            return absl::OkStatus();
        };
        return io;
    }

    absl::Status download(ParamSet& params) override {
        if (&params == &trained_) return absl::OkStatus();  // trained in place
        if (&params == frozen_) return absl::OkStatus();    // the base under an adapter: unchanged
        for (size_t i = 0; i < params.all().size(); ++i) {
            const Tensor& from = trained_.all()[i].value;
            std::memcpy(params.all()[i].value.raw_data(), from.raw_data(), from.nbytes());
        }
        return absl::OkStatus();
    }

    ParamBytes param_bytes(const ParamSet& layout) override {
        // trained_ is the model's own set (full fine-tuning trains in place): its dtypes.
        if (&layout != &trained_) {
            return [](size_t, const SafetensorsWrite&) {
                return absl::FailedPreconditionError("param_bytes: not the trained set");
            };
        }
        return param_bytes_of(trained_);
    }

  private:
    Communicator& comm_;
    ParamSet& trained_;  // the parameters, or the adapter's tensors
    ShardedOptimizer optimizer_;
    Qwen35CpuModel net_;
    ParamSet grads_;  // of trained_
    // With an adapter: the small base gradients the blocks form on the way, never used.
    Qwen35CpuModel::FrozenBaseGrads base_grads_;
    const ParamSet* frozen_ = nullptr;  // with an adapter: the base
    bool pending_ = false;              // grads_ hold a micro-batch the optimizer has not taken yet
};

}  // namespace

std::unique_ptr<TrainEngine> make_cpu_train_engine(HfModel& model, Communicator& comm,
                                                   ParamSet* adapters, float lora_scale) {
    return std::make_unique<CpuTrainEngine>(model, comm, adapters, lora_scale);
}

}  // namespace deltatune
