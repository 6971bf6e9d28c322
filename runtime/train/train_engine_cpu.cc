// The CPU reference engine: Qwen35CpuModel and ShardedOptimizer (fp64 gradient accumulation).
#include <cstring>

#include "runtime/base/status_macros.h"
#include "runtime/train/sharded_optimizer.h"
#include "runtime/train/train_engine.h"

namespace deltatune {

namespace {

class CpuTrainEngine final : public TrainEngine {
  public:
    CpuTrainEngine(HfModel& model, Communicator& comm)
        : comm_(comm),
          params_(model.params),
          optimizer_(ShardedOptimizer::create(model.params, &comm)),
          net_(model.config, model.params),
          grads_(model.params.zeros_like()) {}

    std::string name() const override { return "cpu"; }
    Communicator& comm() override { return comm_; }
    absl::Status begin_step() override { return absl::OkStatus(); }  // step() clears

    absl::StatusOr<double> forward_backward(const PackedBatch& b, int64_t global_labels,
                                            bool) override {
        if (b.label_tokens() == 0) return 0.0;  // no collective here: nothing to join
        for (auto& g : grads_.all()) g.value.fill_zero();
        DT_ASSIGN_OR_RETURN(LossResult r, net_.forward(b));
        DT_RETURN_IF_ERROR(net_.backward(grads_, 1.0 / static_cast<double>(global_labels)));
        optimizer_.accumulate(grads_);
        return r.loss_sum;
    }

    absl::StatusOr<double> apply(const AdamWHyper& hyper, double max_grad_norm) override {
        return optimizer_.step(params_, hyper, max_grad_norm);
    }

    absl::StatusOr<LossResult> evaluate(const PackedBatch& b) override { return net_.forward(b); }

    ShardedStateIo state_io() override {
        ShardedStateIo io;
        io.group_sizes = optimizer_.group_sizes();
        io.adam_step = optimizer_.adam_step();
        io.save_shard = [this](const std::string& path) { return optimizer_.save_shard(path); };
        io.load = [this](const std::vector<std::string>& files, int64_t adam_step) {
            DT_RETURN_IF_ERROR(optimizer_.load(files, params_));
            optimizer_.set_adam_step(adam_step);
            return absl::OkStatus();
        };
        return io;
    }

    absl::Status download(ParamSet& params) override {
        if (&params == &params_) return absl::OkStatus();  // trained in place
        for (size_t i = 0; i < params.all().size(); ++i) {
            const Tensor& from = params_.all()[i].value;
            std::memcpy(params.all()[i].value.raw_data(), from.raw_data(), from.nbytes());
        }
        return absl::OkStatus();
    }

  private:
    Communicator& comm_;
    ParamSet& params_;
    ShardedOptimizer optimizer_;
    Qwen35CpuModel net_;
    ParamSet grads_;
};

}  // namespace

std::unique_ptr<TrainEngine> make_cpu_train_engine(HfModel& model, Communicator& comm) {
    return std::make_unique<CpuTrainEngine>(model, comm);
}

}  // namespace deltatune
