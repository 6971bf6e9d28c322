// The labeled rows of a batch: which rows, in order, their inverse map, and the threshold below
// which the head runs on every row.
#include <catch2/catch.hpp>

#include <vector>

#include "runtime/batch/label_rows.h"

namespace deltatune {
namespace {

TEST_CASE("label_rows: the labeled rows, their targets and each row's place", "[batch]") {
    const std::vector<int32_t> targets = {-100, 5, 7, -100, -100, 9};
    const auto r = label_rows(targets, 0.0);
    REQUIRE(r.has_value());
    CHECK(r->rows == std::vector<int32_t>{1, 2, 5});
    CHECK(r->targets == std::vector<int32_t>{5, 7, 9});
    CHECK(r->position == std::vector<int32_t>{-1, 0, 1, -1, -1, 2});
}

TEST_CASE("label_rows: every row labeled, or too few without a label, runs the full head",
          "[batch]") {
    CHECK_FALSE(label_rows({1, 2, 3, 4}, 0.0).has_value());
    CHECK_FALSE(label_rows({-100, -100}, 0.0).has_value());
    std::vector<int32_t> targets(128, 3);
    targets[0] = -100;  // 1 of 128: under 1/64
    CHECK_FALSE(label_rows(targets, kGpuLabelRowsMinUnlabeled).has_value());
    targets[100] = -100;  // 2 of 128: 1/64
    CHECK(label_rows(targets, kGpuLabelRowsMinUnlabeled).has_value());
    CHECK(label_rows(targets, 0.0)->rows.size() == 126);
}

}  // namespace
}  // namespace deltatune
