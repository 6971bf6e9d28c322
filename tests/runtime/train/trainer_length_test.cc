// How long the loop trains: num_epochs over the packed plan, warmup_ratio, and early stopping
// (the best checkpoint kept past keep_last_n, the export holding its weights, the same stop
// after a resume).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/train/checkpoint_store.h"
#include "runtime/train/trainer.h"
#include "runtime/train/trainer_inputs.h"
#include "tests/common/test_util.h"
#include "tests/runtime/train/trainer_test_util.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using testing::config;

using Run = testing::RecordedRun;
using testing::run;

std::string bytes_of(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

TEST_CASE("num_epochs trains the plan's steps times the epochs, warmup_ratio of them", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = config(tmp, "epochs");
    c.max_steps = 0;
    c.num_epochs = 2;
    c.warmup_ratio = 0.25;
    c.checkpoint_every = 0;
    c.eval_files = {};
    const Run r = run(c);
    REQUIRE(r.result.ok());
    const auto started = r.of("TRAINING_STARTED");
    REQUIRE(started.size() == 1);
    const double per_epoch = started[0]->metrics.at("steps_per_epoch");
    const double steps = started[0]->metrics.at("max_steps");
    CHECK(per_epoch > 2);
    CHECK(steps == 2 * per_epoch);
    CHECK(started[0]->metrics.at("warmup_steps") == std::ceil(0.25 * steps));
    CHECK(started[0]->metrics.at("tokens_per_epoch") > 0);
    const auto metrics = r.of("STEP_METRICS");
    REQUIRE(static_cast<double>(metrics.size()) == steps);
    CHECK(r.result->step == static_cast<int64_t>(steps));
    // Linear warmup from 0 to the peak (3e-3) over the warmup steps.
    const double warmup = std::ceil(0.25 * steps);
    CHECK(metrics[0]->metrics.at("lr") == Approx(3e-3 / warmup));
}

TEST_CASE("a step's progress is reported before its evaluation runs", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = config(tmp, "order");
    c.eval_every = 4;
    std::vector<std::string> seen;  // "progress N" and "eval N", in the order they came
    TrainerHooks hooks;
    hooks.on_progress = [&](const TrainProgress& p) {
        seen.push_back("progress " + std::to_string(p.step));
    };
    hooks.on_event = [&](const TrainerEvent& e) {
        if (e.type == "EVAL_METRICS") {
            seen.push_back("eval " + std::to_string(static_cast<int>(e.metrics.at("step"))));
        }
    };
    REQUIRE(train(c, hooks).ok());
    const auto at = [&](const std::string& what) {
        return std::find(seen.begin(), seen.end(), what) - seen.begin();
    };
    // Otherwise a watcher sees step 4's eval loss beside step 3.
    CHECK(at("progress 4") < at("eval 4"));
    CHECK(at("progress 8") < at("eval 8"));
}

// Evaluations every 2 steps of 8; min_delta so large that only the first one is ever the best:
// patience 2 stops the run after the evaluations of steps 4 and 6.
TrainConfig stopping_config(const testing::TempDir& tmp, const std::string& out) {
    TrainConfig c = config(tmp, out);
    c.eval_every = 2;
    c.checkpoint_every = 1;
    c.keep_last_n = 1;
    c.early_stopping = {2, 100.0};
    return c;
}

TEST_CASE("early stopping ends the run, keeps the best checkpoint and exports it", "[train]") {
    testing::TempDir tmp;
    const TrainConfig c = stopping_config(tmp, "stop");
    const Run r = run(c);
    REQUIRE(r.result.ok());
    CHECK(r.result->completed);
    CHECK(r.result->early_stopped);
    CHECK(r.result->step == 6);
    CHECK(r.result->exported_step == 2);
    const auto stopped = r.of("EARLY_STOPPED");
    REQUIRE(stopped.size() == 1);
    CHECK(stopped[0]->metrics.at("best_step") == 2);
    CHECK(r.of("STEP_METRICS").size() == 6);
    int best = 0;
    for (const TrainerEvent* e : r.of("CHECKPOINT_COMMITTED")) {
        if (e->details.count("best")) {
            ++best;
            CHECK(e->metrics.at("step") == 2);
            CHECK(e->metrics.count("eval_loss"));
        }
    }
    CHECK(best == 1);
    // keep_last_n 1 keeps the newest, and the best beside it.
    auto ckpts = list_checkpoints(c.output_dir + "/checkpoints");
    REQUIRE(ckpts.ok());
    REQUIRE(ckpts->size() == 2);
    CHECK((*ckpts)[0].step == 2);
    CHECK((*ckpts)[1].step == 6);
    // The export is the best checkpoint's weights, as `deltatune export --step 2` writes them.
    const std::string again = tmp.file("again");
    REQUIRE(export_checkpoint(c, (*ckpts)[0].path, again).ok());
    CHECK(bytes_of(r.result->export_dir + "/model.safetensors") ==
          bytes_of(again + "/model.safetensors"));
}

TEST_CASE("a resumed run stops early where an uninterrupted one does", "[train]") {
    testing::TempDir tmp;
    const TrainConfig straight = stopping_config(tmp, "straight");
    const Run a = run(straight);
    REQUIRE(a.result.ok());
    const TrainConfig split = stopping_config(tmp, "split");
    const Run first = run(split, testing::stop_at_step(4));  // after one evaluation in vain
    REQUIRE(first.result.ok());
    CHECK_FALSE(first.result->completed);
    const Run second = run(split);
    REQUIRE(second.result.ok());
    CHECK(second.result->early_stopped);
    CHECK(second.result->step == 6);
    CHECK(second.result->exported_step == 2);
    CHECK(bytes_of(a.result->export_dir + "/model.safetensors") ==
          bytes_of(second.result->export_dir + "/model.safetensors"));
}

}  // namespace
}  // namespace deltatune
