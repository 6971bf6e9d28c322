// DeviceContext on CPU and CUDA ([cuda]: skipped with a printed reason where no GPU is present),
// tensor device round trips, and the CUDA error translation.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/device/cuda_status.h"
#include "runtime/device/device_context.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

TEST_CASE("CPU contexts always work; CUDA contexts fail clearly without a device", "[runtime]") {
    auto cpu = DeviceContext::create(Device::cpu());
    REQUIRE(cpu.ok());
    CHECK((*cpu)->compute_stream() == nullptr);
    CHECK((*cpu)->synchronize().ok());
    std::string why;
    if (cuda_device_count(&why) == 0) {
        auto gpu = DeviceContext::create(Device::cuda(0));
        REQUIRE_FALSE(gpu.ok());
        CHECK(gpu.status().code() == absl::StatusCode::kFailedPrecondition);
        CHECK(std::string(gpu.status().message()).find("cannot use cuda:0: ") == 0);
    }
}

using testing::ScopedEnv;

TEST_CASE("a CUDA context refuses an unknown DELTATUNE_ATTENTION, naming it", "[runtime]") {
    {
        ScopedEnv typo("DELTATUNE_ATTENTION", "flsh");
        auto gpu = DeviceContext::create(Device::cuda(0));
        REQUIRE_FALSE(gpu.ok());
        CHECK(gpu.status().code() == absl::StatusCode::kInvalidArgument);
#if DELTATUNE_HAVE_CUDNN_ATTENTION
        CHECK(std::string(gpu.status().message()) ==
              "DELTATUNE_ATTENTION='flsh': expected 'wgmma', 'cudnn' or 'flash'");
#else
        CHECK(std::string(gpu.status().message()) ==
              "DELTATUNE_ATTENTION='flsh': expected 'wgmma' or 'flash'");
#endif
        CHECK(DeviceContext::create(Device::cpu()).ok());  // CPU runs pick no attention core
    }
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    for (const char* good : {"wgmma", "cudnn", "flash"}) {
#else
    for (const char* good : {"wgmma", "flash"}) {
#endif
        ScopedEnv choice("DELTATUNE_ATTENTION", good);
        const absl::StatusOr<AttentionCore> core = attention_core_from_env();
        REQUIRE(core.ok());
        CHECK(std::string(attention_core_name(*core)) == good);
    }
}

TEST_CASE("a CUDA context refuses an unknown DELTATUNE_GEMM, naming it", "[runtime]") {
    {
        ScopedEnv typo("DELTATUNE_GEMM", "fastest");
        auto gpu = DeviceContext::create(Device::cuda(0));
        REQUIRE_FALSE(gpu.ok());
        CHECK(gpu.status().code() == absl::StatusCode::kInvalidArgument);
        CHECK(std::string(gpu.status().message()) ==
              "DELTATUNE_GEMM='fastest': expected 'timed' or 'heuristic'");
    }
    {
        ScopedEnv unset("DELTATUNE_GEMM", nullptr);
        CHECK_FALSE(gemm_times_candidates());
    }
    {
        ScopedEnv choice("DELTATUNE_GEMM", "heuristic");
        CHECK(check_gemm_choice().ok());
        CHECK_FALSE(gemm_times_candidates());
    }
    ScopedEnv choice("DELTATUNE_GEMM", "timed");
    CHECK(check_gemm_choice().ok());
    CHECK(gemm_times_candidates());
}

TEST_CASE("CUDA errors keep the statement and location", "[runtime]") {
    const absl::Status s =
        cuda_status(2, "cudaMalloc(&p, n)", "x.cc", 12);  // cudaErrorMemoryAllocation
    CHECK(s.code() == absl::StatusCode::kResourceExhausted);
    CHECK(std::string(s.message()).find("cudaMalloc(&p, n) failed at x.cc:12") == 0);
    CHECK(cuda_status(0, "ok", "x.cc", 1).ok());
}

TEST_CASE("tensors round trip through the GPU and contexts own their streams", "[runtime][cuda]") {
    std::string why;
    if (cuda_device_count(&why) == 0) {
        WARN("skipped: " << why);
        return;
    }
    auto ctx = DeviceContext::create(Device::cuda(0));
    REQUIRE(ctx.ok());
    CHECK((*ctx)->compute_stream() != nullptr);
    CHECK((*ctx)->comm_stream() != (*ctx)->compute_stream());
    Tensor t = Tensor::cpu_from(
        {3, 5}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15.5f});
    auto gpu = t.to_device(Device::cuda(0));
    REQUIRE(gpu.ok());
    CHECK(gpu->device() == Device::cuda(0));
    auto back = gpu->to_cpu_f32();
    REQUIRE(back.ok());
    for (int i = 0; i < 15; ++i) CHECK(back->data<float>()[i] == t.data<float>()[i]);
    CHECK((*ctx)->synchronize().ok());
}

}  // namespace
}  // namespace deltatune
