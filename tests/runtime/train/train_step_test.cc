// run_train_step (runtime/train/train_step.h): the trainer's steps are exactly its steps on the
// same batches, it calls the engine in the trainer's order, and a non-finite loss or norm stops
// it with NON_FINITE.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/train/train_step.h"
#include "runtime/train/trainer.h"
#include "runtime/train/trainer_inputs.h"
#include "tests/common/test_util.h"
#include "tests/runtime/train/trainer_test_util.h"

namespace deltatune {
namespace {

// The trainer's micro-batches of the next step at world size 1 (trainer.cc next_batches).
std::vector<PackedBatch> next_step_batches(const TrainConfig& c, const Loaded& in, Packer& packer,
                                           int64_t& labels) {
    std::vector<PackedBatch> micro;
    labels = 0;
    for (int64_t m = 0; m < c.grad_accum; ++m) {
        for (const PackedBin& bin : packer.next_step()) {
            auto b = assemble(in.train, bin, in.model.config.vocab_size);
            REQUIRE(b.ok());
            labels += b->label_tokens();
            micro.push_back(std::move(*b));
        }
    }
    return micro;
}

TEST_CASE("the trainer's steps are run_train_step's on the same batches", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = testing::config(tmp, "trained");
    c.eval_files.clear();
    c.max_steps = 4;
    c.grad_accum = 2;
    c.checkpoint_every = 0;
    const testing::RecordedRun trained = testing::run(c);
    REQUIRE(trained.result.ok());
    const auto metrics = trained.of("STEP_METRICS");
    REQUIRE(metrics.size() == 4);

    // The same inputs, engine, packing and schedule, stepped by hand.
    TrainConfig by_hand = c;
    by_hand.output_dir = tmp.file("by_hand");
    auto in = load_train_inputs(by_hand, {});
    REQUIRE(in.ok());
    LocalCommunicator local;
    auto engine = make_cpu_engine_for(by_hand, in->model, local, in->adapters);
    REQUIRE(engine.ok());
    PackingOptions po{c.tokens_per_batch, c.shuffle_window, c.seed, 1, c.overlong, {}};
    auto packer = Packer::create(in->train.lengths(), po);
    REQUIRE(packer.ok());
    LrSchedule lr = c.lr;
    lr.max_steps = c.max_steps;
    for (int64_t step = 1; step <= c.max_steps; ++step) {
        int64_t labels = 0;
        const std::vector<PackedBatch> micro = next_step_batches(c, *in, *packer, labels);
        AdamWHyper hyper = c.adamw;
        hyper.lr = lr.at(step);
        auto r = run_train_step(**engine, micro, labels, hyper, c.max_grad_norm, step);
        REQUIRE(r.ok());
        const auto& m = metrics[static_cast<size_t>(step - 1)]->metrics;
        INFO("step " << step);
        CHECK(m.at("loss") == r->loss_sum / static_cast<double>(labels));
        CHECK(m.at("grad_norm") == r->grad_norm);
        CHECK(m.at("lr") == hyper.lr);
        CHECK(m.at("trained_tokens") == static_cast<double>(labels));
    }
}

// An engine that records the calls it gets and returns the loss sums and norm it is given.
class ScriptedEngine final : public TrainEngine {
  public:
    std::vector<std::string> calls;
    double loss_sum = 1.5, norm = 0.25;

    std::string name() const override { return "scripted"; }
    Communicator& comm() override { return comm_; }
    absl::Status begin_step() override {
        calls.push_back("begin");
        return absl::OkStatus();
    }
    absl::StatusOr<double> forward_backward(const PackedBatch& b, int64_t global_labels,
                                            bool last) override {
        calls.push_back("fb " + std::to_string(b.tokens()) + " " + std::to_string(global_labels) +
                        (last ? " last" : ""));
        return loss_sum;
    }
    absl::StatusOr<double> apply(const AdamWHyper& hyper, double max_grad_norm) override {
        calls.push_back("apply " + std::to_string(hyper.lr) + " " + std::to_string(max_grad_norm));
        return norm;
    }
    absl::StatusOr<LossResult> evaluate(const PackedBatch&) override { return LossResult{}; }
    ShardedStateIo state_io() override { return {}; }
    absl::Status download(ParamSet&) override { return absl::OkStatus(); }
    ParamBytes param_bytes(const ParamSet&) override { return nullptr; }

  private:
    LocalCommunicator comm_;
};

std::vector<PackedBatch> batches_of(const std::vector<int>& lengths) {
    std::vector<PackedBatch> out;
    for (int n : lengths) {
        Document d;
        d.input_ids.assign(static_cast<size_t>(n), 1);
        d.labels = d.input_ids;
        auto b = pack_documents({d}, 8);
        REQUIRE(b.ok());
        out.push_back(std::move(*b));
    }
    return out;
}

TEST_CASE("run_train_step: begin, every micro-batch (the last marked), apply", "[train]") {
    ScriptedEngine e;
    AdamWHyper hyper;
    hyper.lr = 0.5;
    auto r = run_train_step(e, batches_of({3, 5}), 8, hyper, 1.0, 1);
    REQUIRE(r.ok());
    CHECK(r->loss_sum == 3.0);
    CHECK(r->grad_norm == 0.25);
    CHECK(e.calls ==
          std::vector<std::string>{"begin", "fb 3 8", "fb 5 8 last", "apply 0.500000 1.000000"});
}

TEST_CASE("run_train_step: a non-finite loss stops before the update, a norm after it", "[train]") {
    ScriptedEngine e;
    e.loss_sum = std::numeric_limits<double>::quiet_NaN();
    auto r = run_train_step(e, batches_of({4}), 4, AdamWHyper{}, 0.0, 7);
    REQUIRE(r.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(r.status().message()).rfind("NON_FINITE: step 7: the loss is nan", 0) == 0);
    CHECK(e.calls == std::vector<std::string>{"begin", "fb 4 4 last"});

    ScriptedEngine f;
    f.norm = std::numeric_limits<double>::infinity();
    r = run_train_step(f, batches_of({4}), 4, AdamWHyper{}, 0.0, 2);
    REQUIRE(r.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(r.status().message()).rfind("NON_FINITE: step 2: the gradient norm", 0) == 0);
    CHECK(f.calls.back().rfind("apply", 0) == 0);
}

}  // namespace
}  // namespace deltatune
