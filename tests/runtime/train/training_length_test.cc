// The run's length: fixed steps or epochs over the packed plan, and warmup in steps or as a
// ratio; the learning-rate schedule that follows it.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/train/lr_schedule.h"
#include "runtime/train/training_length.h"

namespace deltatune {
namespace {

std::string message(const absl::Status& s) {
    return std::string(s.message());
}

TEST_CASE("max_steps is the length as given; epochs multiply the plan", "[train]") {
    auto fixed = training_length({120, 0, 10, 0}, 67, 1);
    REQUIRE(fixed.ok());
    CHECK(fixed->max_steps == 120);
    CHECK(fixed->warmup_steps == 10);
    CHECK(fixed->steps_per_epoch == 67);
    auto three = training_length({0, 3, 0, 0}, 67, 1);
    REQUIRE(three.ok());
    CHECK(three->max_steps == 201);
    auto half = training_length({0, 0.5, 0, 0}, 67, 1);
    REQUIRE(half.ok());
    CHECK(half->max_steps == 34);  // 33.5 micro-steps: the 34th is needed to cover them
    // An optimizer step takes grad_accum micro-steps: 10 per epoch, 4 at a time.
    auto accum = training_length({0, 2, 0, 0}, 10, 4);
    REQUIRE(accum.ok());
    CHECK(accum->steps_per_epoch == 3);
    CHECK(accum->max_steps == 5);
    // A product a rounding error above an integer is that integer, not the next one.
    auto tenth = training_length({0, 0.1, 0, 0}, 30, 1);
    REQUIRE(tenth.ok());
    CHECK(tenth->max_steps == 3);
}

TEST_CASE("warmup_ratio is a rounded-up fraction of the steps", "[train]") {
    auto r = training_length({0, 3, 0, 0.1}, 67, 1);
    REQUIRE(r.ok());
    CHECK(r->warmup_steps == 21);  // ceil(20.1)
    auto exact = training_length({200, 0, 0, 0.05}, 1, 1);
    REQUIRE(exact.ok());
    CHECK(exact->warmup_steps == 10);
}

TEST_CASE("a length given twice, or not at all, or a warmup past it, is refused", "[train]") {
    CHECK(message(training_length({10, 2, 0, 0}, 5, 1).status()) ==
          "give one of max_steps (10) and num_epochs (2)");
    CHECK(message(training_length({0, 0, 0, 0}, 5, 1).status()) ==
          "give one of max_steps (0) and num_epochs (0)");
    CHECK(message(training_length({0, 1, 8, 0}, 5, 1).status()) ==
          "warmup of 8 steps is longer than the run's 5 steps");
}

TEST_CASE("learning-rate schedules", "[train]") {
    LrSchedule s{LrScheduleKind::kCosine, 1.0, 10, 110, 0.1};
    CHECK(s.at(5) == Approx(0.5));
    CHECK(s.at(10) == Approx(1.0));
    CHECK(s.at(60) == Approx(0.55));
    CHECK(s.at(110) == Approx(0.1));
    s.kind = LrScheduleKind::kLinear;
    CHECK(s.at(60) == Approx(0.55));
    CHECK(s.at(85) == Approx(0.325));
    s.kind = LrScheduleKind::kConstant;
    CHECK(s.at(100) == Approx(1.0));
}

}  // namespace
}  // namespace deltatune
