// The training plan (runtime/train/training_plan.h) is what the trainer trains: per step the same
// batch digest as the job's STEP_METRICS, batches whose tokens are their segments' and whose
// labels give back their targets.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/train/training_plan.h"
#include "tests/runtime/train/trainer_test_util.h"

namespace deltatune {
namespace {

TEST_CASE("training plan: the trainer's batches, step by step", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = testing::config(tmp, "run");
    c.grad_accum = 2;
    std::stringstream plan;
    auto steps = write_training_plan(c, 2, plan);
    REQUIRE(steps.ok());
    CHECK(*steps == c.max_steps);
    std::vector<double> plan_digests;
    int64_t batches = 0;
    for (std::string line; std::getline(plan, line);) {
        const auto j = nlohmann::json::parse(line);
        if (j.contains("batch_digest")) {
            plan_digests.push_back(j["batch_digest"].get<double>());
            continue;
        }
        ++batches;
        const auto ids = j["input_ids"].get<std::vector<int32_t>>();
        const auto labels = j["labels"].get<std::vector<int32_t>>();
        const auto cu = j["cu_seqlens"].get<std::vector<int32_t>>();
        int64_t tokens = 0;
        for (const auto& s : j["segments"]) tokens += s[2].get<int64_t>() - s[1].get<int64_t>();
        CHECK(static_cast<int64_t>(ids.size()) == tokens);
        CHECK(labels.size() == ids.size());
        CHECK(cu.back() == static_cast<int32_t>(ids.size()));
        for (size_t d = 0; d + 1 < cu.size(); ++d) {  // no document predicts its neighbour
            if (cu[d] < static_cast<int32_t>(ids.size())) CHECK(labels[cu[d]] == -100);
        }
    }
    CHECK(batches == c.max_steps * c.grad_accum * 2);

    // Two data shards on one rank: the trainer takes both bins of every micro-step.
    c.data_shards = 2;
    testing::RecordedRun run;
    TrainerHooks hooks;
    hooks.on_event = [&](const TrainerEvent& e) { run.events.push_back(e); };
    run.result = train(c, hooks);
    REQUIRE(run.result.ok());
    std::vector<double> trained;
    for (const TrainerEvent* e : run.of("STEP_METRICS")) {
        trained.push_back(e->metrics.at("batch_digest"));
    }
    CHECK(trained == plan_digests);
}

}  // namespace
}  // namespace deltatune
