// The loaded-code probe (kernels/common/code_arch.cu) against the build's targets and the GPU at
// hand: the sm_90a code on Hopper unless the build is the portable one, the portable code (as
// this GPU's SASS) elsewhere ([cuda]).
#include <catch2/catch.hpp>

#include <string>

#include "kernels/common/code_arch.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

TEST_CASE("loaded code: the build's targets decide what runs on this GPU", "[kernels][cuda]") {
    if (!have_gpu()) return;
    int device = 0, major = 0, minor = 0;
    REQUIRE(cudaGetDevice(&device) == cudaSuccess);
    REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
            cudaSuccess);
    REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) ==
            cudaSuccess);
    const int sm = major * 10 + minor;
    const std::string targets = DELTATUNE_TEST_CUDA_TARGETS;
    const LoadedCode code = loaded_code();
    INFO("sm_" << sm << ", targets " << targets << ": code " << code.arch << " as sm_"
               << code.binary);
    if (targets == "portable") {
        CHECK(code.arch == kPortableCodeArch);
        CHECK(code.binary == sm);  // the driver compiled the PTX for this GPU
    } else if (sm == 90) {
        CHECK(code.arch == kHopperCodeArch);
        CHECK(code.binary == 90);
    } else if (targets == "all" && sm >= 80) {
        CHECK(code.arch == kPortableCodeArch);
    } else {
        CHECK(code.arch == 0);
    }
}
#else
TEST_CASE("loaded code: the build's targets decide what runs on this GPU", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
