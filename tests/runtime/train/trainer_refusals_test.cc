// What the training loop refuses instead of reporting a fake success: data with no trained token,
// a non-finite loss or gradient norm; and what it counts instead of dropping silently: the lines
// bad_lines: skip leaves out; and an evaluation is not run twice for one step.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/train/trainer.h"
#include "tests/common/test_util.h"
#include "tests/runtime/train/trainer_test_util.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using testing::config;

using Run = testing::RecordedRun;
using testing::run;

const TrainerEvent* find(const Run& r, const std::string& type) {
    const auto all = r.of(type);
    return all.empty() ? nullptr : all.front();
}

// One step over the default data with `extra` appended to the training file: its DATA_LOADED.
TrainerEvent data_loaded_with(TrainConfig c, const std::string& extra) {
    c.max_steps = 1;
    c.lr.warmup_steps = 0;
    {
        std::ofstream out(c.train_files[0], std::ios::app);
        out << extra;
    }
    const Run r = run(c);
    REQUIRE(r.result.ok());
    const TrainerEvent* loaded = find(r, "DATA_LOADED");
    REQUIRE(loaded != nullptr);
    return *loaded;
}

TEST_CASE("data without one trained token is refused naming the files", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = config(tmp, "run");
    const std::string masked = tmp.file("masked.jsonl");
    {
        std::ofstream out(masked);
        for (int i = 0; i < 20; ++i)
            out << R"({"input_ids": [1, 2, 3], "labels": [-100, -100, -100]})"
                   "\n";
    }
    c.train_files = {masked};
    const Run r = run(c);
    REQUIRE(!r.result.ok());
    CHECK(r.result.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.result.status().message()),
               Catch::StartsWith("NO_TRAINED_TOKENS: " + masked) &&
                   Catch::Contains("20 documents but not one trained token"));
    CHECK(find(r, "EXPORT_COMPLETED") == nullptr);
}

TEST_CASE("a non-finite loss stops the run at its step, with no export", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = config(tmp, "run");
    // Finite but absurd: the first update scales every weight by (1 - lr * 1e300), so the
    // second step's forward overflows.
    c.adamw.weight_decay = 1e300;
    c.lr = {LrScheduleKind::kConstant, 1.0, 0, 8, 1.0};
    const Run r = run(c);
    REQUIRE(!r.result.ok());
    const std::string why(r.result.status().message());
    CHECK_THAT(why, Catch::StartsWith("NON_FINITE: step "));
    CHECK(find(r, "EXPORT_COMPLETED") == nullptr);
    for (const auto& e : r.events) {
        if (e.type == "STEP_METRICS") CHECK(std::isfinite(e.metrics.at("loss")));
    }
}

TEST_CASE("skipped bad lines are counted per file in DATA_LOADED", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = config(tmp, "run");
    c.bad_lines = BadLinePolicy::kSkipAndCount;
    const TrainerEvent e = data_loaded_with(c, "not json\n{\"input_ids\": []}\n");
    const TrainerEvent* loaded = &e;
    CHECK(loaded->metrics.at("skipped_lines") == 2);
    CHECK(loaded->level == "WARNING");
    const auto it = loaded->details.find("skipped_lines:" + c.train_files[0]);
    REQUIRE(it != loaded->details.end());
    CHECK_THAT(it->second, Catch::StartsWith("2 of 122 lines ("));
    CHECK(loaded->metrics.at("trained_tokens") > 0);
}

TEST_CASE("documents longer than a batch are counted in DATA_LOADED under each policy", "[train]") {
    for (const OverlongPolicy policy :
         {OverlongPolicy::kSplit, OverlongPolicy::kTruncate, OverlongPolicy::kDrop}) {
        testing::TempDir tmp;
        TrainConfig c = config(tmp, "run");
        c.overlong = policy;
        std::string long_doc = R"({"input_ids": [)";
        for (int i = 0; i < 150; ++i) absl::StrAppend(&long_doc, i ? ", " : "", 1 + i % 7);
        const TrainerEvent e = data_loaded_with(c, long_doc + "]}\n");
        const TrainerEvent* loaded = &e;
        CHECK(loaded->metrics.at("overlong_documents") == 1);
        const double left_out = policy == OverlongPolicy::kSplit      ? 0
                                : policy == OverlongPolicy::kTruncate ? 150 - 96
                                                                      : 150;
        CHECK(loaded->metrics.at("overlong_tokens_left_out") == left_out);
        CHECK_THAT(loaded->details.at("overlong"),
                   Catch::StartsWith("1 document(s) longer than tokens_per_batch (96): " +
                                     std::string(overlong_policy_name(policy))));
    }
}

TEST_CASE("a step with no trained token reports its loss as NaN, never 0", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = config(tmp, "run");
    // One document in four has trained tokens; a batch holds one document, so some steps train
    // on nothing (the first document keeps the data from being refused).
    const std::string mixed = tmp.file("mixed.jsonl");
    {
        std::ofstream out(mixed);
        for (int i = 0; i < 40; ++i) {
            out << (i % 4 == 0 ? R"({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8]})"
                               : R"({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8], "labels": )"
                                 R"([-100, -100, -100, -100, -100, -100, -100, -100]})")
                << "\n";
        }
    }
    c.train_files = {mixed};
    c.eval_files = {};
    c.tokens_per_batch = 16;
    c.max_steps = 12;
    const Run r = run(c);
    REQUIRE(r.result.ok());
    int empty = 0, trained = 0;
    for (const auto& e : r.events) {
        if (e.type != "STEP_METRICS") continue;
        if (e.metrics.at("trained_tokens") == 0) {
            ++empty;
            CHECK(std::isnan(e.metrics.at("loss")));
        } else {
            ++trained;
            CHECK(std::isfinite(e.metrics.at("loss")));
            CHECK(e.metrics.at("loss") > 0);
        }
    }
    CHECK(empty > 0);
    CHECK(trained > 0);
}

TEST_CASE("the final evaluation is not repeated when the last step evaluated", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = config(tmp, "run");
    c.eval_every = 4;  // max_steps 8: steps 4 and 8, and no third at the end
    const Run r = run(c);
    REQUIRE(r.result.ok());
    std::vector<double> steps;
    for (const auto& e : r.events) {
        if (e.type == "EVAL_METRICS") steps.push_back(e.metrics.at("step"));
    }
    CHECK(steps == std::vector<double>{4, 8});
}

}  // namespace
}  // namespace deltatune
