// The row gather: the reference on a hand-checked case, and the CUDA kernel against the reference
// on fresh random inputs with a poisoned output, both copy paths and zero rows included ([cuda]:
// skipped with a printed reason where no GPU is present).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/tensor/rows.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

TEST_CASE("gather_rows_ref: rows by index, zero rows for negative indices", "[kernels]") {
    const std::vector<float> in = {1, 2, 3, 4, 5, 6};  // 3 rows of 2
    const std::vector<int32_t> idx = {2, -1, 0, 2};
    std::vector<float> out(8, -7.0f);
    gather_rows_ref(out.data(), in.data(), idx.data(), 4, 2);
    CHECK(out == std::vector<float>{5, 6, 0, 0, 1, 2, 5, 6});
}

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

TEST_CASE("gather_rows matches the reference bit for bit", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(11);
    // 5120: the 16-byte path; 37: the element path; 8 with an offset input: misaligned.
    for (const int64_t cols : {int64_t{5120}, int64_t{37}, int64_t{8}}) {
        for (const bool offset : {false, true}) {
            const int64_t rows = 300, n = 517;
            const Bf16Data in = random_bf16(static_cast<size_t>((rows + 1) * cols), rng);
            std::vector<int32_t> idx(static_cast<size_t>(n));
            for (auto& i : idx) i = static_cast<int32_t>(rng() % (rows + 40)) - 40;  // ~12% zero
            DeviceBuffer<uint16_t> d_in(in.bits);
            DeviceBuffer<int32_t> d_idx(idx);
            DeviceBuffer<uint16_t> d_out(static_cast<size_t>(n * cols));
            d_out.poison();
            const __nv_bfloat16* src = bf16_ptr(d_in) + (offset ? 1 : 0);
            INFO("cols " << cols << (offset ? ", input offset by one element" : ""));
            REQUIRE(gather_rows(bf16_ptr(d_out), src, d_idx.get(), n, cols, nullptr) ==
                    cudaSuccess);
            std::vector<uint16_t> want(static_cast<size_t>(n * cols));
            gather_rows_ref(want.data(), in.bits.data() + (offset ? 1 : 0), idx.data(), n, cols);
            CHECK(d_out.download() == want);
        }
    }
}
#else
TEST_CASE("gather_rows matches the reference bit for bit", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
