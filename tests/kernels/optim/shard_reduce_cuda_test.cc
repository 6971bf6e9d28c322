// shard_reduce kernels against their references on random inputs: accumulate on aligned and
// misaligned pointers (float4 and scalar paths), the squared-norm sum and the clip coefficient
// ([cuda]; skipped with a printed reason where no GPU is present), and the clip reference itself.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "kernels/optim/shard_reduce.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

TEST_CASE("clip_coef_ref follows torch's clip_grad_norm_", "[kernels]") {
    CHECK(clip_coef_ref(2.0f, 1.0f) == Approx(1.0f / (2.0f + 1e-6f)));
    CHECK(clip_coef_ref(0.5f, 1.0f) == 1.0f);
    CHECK(clip_coef_ref(5.0f, 0.0f) == 1.0f);  // clipping disabled
}

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

TEST_CASE("accumulate_f32 and the norm helpers match the references", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (int64_t n : {1, 3, 5, 4099, 1 << 20}) {
        for (int offset : {0, 1}) {
            INFO("n = " << n << ", offset = " << offset);
            const size_t m = static_cast<size_t>(n + offset);
            std::vector<float> x(m), y(m);
            for (auto& v : x) v = normal(rng);
            for (auto& v : y) v = normal(rng);
            std::vector<float> want = y;
            accumulate_f32_ref(want.data() + offset, x.data() + offset, n);
            DeviceBuffer<float> dx(x), dy(y);
            REQUIRE(accumulate_f32(dy.get() + offset, dx.get() + offset, n, nullptr) ==
                    cudaSuccess);
            CHECK(dy.download() == want);  // one fp32 add per element: bitwise
        }
    }
    const std::vector<float> a{3.0f}, b{4.0f};
    DeviceBuffer<float> da(a), db(b), sq(1), norm(1), coef(1);
    REQUIRE(grad_norm_square_sum(sq.get(), da.get(), db.get(), nullptr) == cudaSuccess);
    CHECK(sq.download()[0] == 25.0f);
    REQUIRE(grad_norm_square_sum(sq.get(), da.get(), nullptr, nullptr) == cudaSuccess);
    CHECK(sq.download()[0] == 9.0f);
    REQUIRE(grad_norm_from_square(norm.get(), coef.get(), sq.get(), 1.0f, nullptr) == cudaSuccess);
    CHECK(norm.download()[0] == 3.0f);
    CHECK(coef.download()[0] == Approx(clip_coef_ref(3.0f, 1.0f)).epsilon(1e-6));
}
#endif

}  // namespace
}  // namespace deltatune
