// The gradient-row references: marks from ids (repeats included), and zeroing exactly the marked
// rows while clearing their marks.
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/optim/grad_rows.h"

namespace deltatune {
namespace {

TEST_CASE("gradient rows are marked by id and only marked rows are zeroed", "[kernels]") {
    const std::vector<int32_t> ids = {3, 0, 3, 5};
    std::vector<uint8_t> touched(6, 0);
    mark_rows_ref(touched.data(), ids.data(), static_cast<int64_t>(ids.size()));
    CHECK(touched == std::vector<uint8_t>{1, 0, 0, 1, 0, 1});
    std::vector<float> grad(12);
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i + 1);
    zero_marked_rows_ref(grad.data(), touched.data(), 6, 2);
    CHECK(grad == std::vector<float>{0, 0, 3, 4, 5, 6, 0, 0, 9, 10, 0, 0});
    CHECK(touched == std::vector<uint8_t>(6, 0));
}

}  // namespace
}  // namespace deltatune
