// The step trace's arithmetic and its Chrome trace-event JSON, on hand-made records (the CUPTI
// collection itself runs on the GPU: scripts/gpu/gpu_train.sh profiles a job).
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <set>
#include <string>

#include "daemon/rank/step_trace.h"
#include "nlohmann/json.hpp"
#include "tests/common/test_util.h"

namespace deltatune::daemon {
namespace {

using Kind = StepTrace::Kind;

TEST_CASE("busy and exposed time are unions of intervals", "[profile]") {
    // Overlapping and touching spans count once; NCCL under compute is hidden.
    CHECK(union_ms({{0, 2'000'000}, {1'000'000, 3'000'000}, {5'000'000, 6'000'000}}) ==
          Approx(4.0));
    CHECK(union_ms({}) == 0.0);
    const std::vector<std::pair<uint64_t, uint64_t>> compute = {{0, 4'000'000}},
                                                     nccl = {{3'000'000, 7'000'000}};
    CHECK(uncovered_ms(nccl, compute) == Approx(3.0));  // 4..7 ms runs alone
    CHECK(uncovered_ms(compute, {}) == Approx(4.0));
}

TEST_CASE("a trace becomes Chrome trace events: GPU streams and host threads", "[profile]") {
    StepTrace t;
    t.events = {{Kind::kKernel, "gemm<128>", 7, 1'000'000, 1'500'000},
                {Kind::kNccl, "ncclDevKernel_ReduceScatter", 13, 1'200'000, 2'000'000},
                {Kind::kMemcpy, "memcpy HtoD", 7, 900'000, 950'000},
                {Kind::kRuntime, "cudaLaunchKernel", 4242, 800'000, 805'000},
                {Kind::kKernel, "say \"hi\"", 7, 2'000'000, 2'001'000}};
    const nlohmann::json j = nlohmann::json::parse(chrome_trace_json(t, "jobs/x rank 0"));
    std::map<std::string, nlohmann::json> spans;
    std::set<std::string> processes, lanes;
    for (const auto& e : j["traceEvents"]) {
        if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"]);
        if (e["ph"] == "M" && e["name"] == "thread_name") lanes.insert(e["args"]["name"]);
        if (e["ph"] == "X") spans[e["name"]] = e;
    }
    CHECK(processes == std::set<std::string>{"jobs/x rank 0 GPU", "jobs/x rank 0 host"});
    CHECK(lanes == std::set<std::string>{"stream 7", "stream 13", "thread 4242"});
    REQUIRE(spans.size() == 5);
    // Microseconds from the first record (the runtime call at 0.8 ms).
    CHECK(spans["cudaLaunchKernel"]["ts"] == 0.0);
    CHECK(spans["gemm<128>"]["ts"].get<double>() == Approx(200.0));
    CHECK(spans["gemm<128>"]["dur"].get<double>() == Approx(500.0));
    CHECK(spans["ncclDevKernel_ReduceScatter"]["cat"] == "nccl");
    CHECK(spans["cudaLaunchKernel"]["cat"] == "cuda_runtime");
    CHECK(spans["cudaLaunchKernel"]["pid"] != spans["gemm<128>"]["pid"]);
    CHECK(spans.count("say \"hi\"") == 1);  // escaped, and parsed back whole
}

TEST_CASE("scripts/tools/trace_gaps.py finds the GPU's idle gaps and what the host did",
          "[profile]") {
    // Two kernels 300 us apart while the host synchronised, then a 2 us launch gap.
    StepTrace t;
    t.events = {{Kind::kKernel, "forward", 7, 0, 1'000'000},
                {Kind::kRuntime, "cudaStreamSynchronize", 1, 900'000, 1'300'000},
                {Kind::kKernel, "backward", 7, 1'300'000, 2'000'000},
                {Kind::kMemset, "memset", 7, 2'002'000, 2'100'000}};
    testing::TempDir dir;
    std::ofstream(dir.file("t.json")) << chrome_trace_json(t, "bench");
    std::string out;
    REQUIRE(testing::run_command("python3 " + testing::source_path("scripts/tools/trace_gaps.py") +
                                     " " + dir.file("t.json") + " 2>&1",
                                 out) == 0);
    CHECK_THAT(out, Catch::Contains("GPU span 2.10 ms, idle 0.30 ms in 2 gaps"));
    CHECK_THAT(out, Catch::Contains("gaps of 0-5 us: 1, 0.00 ms"));
    CHECK_THAT(out, Catch::Contains("after forward, before backward"));
    CHECK_THAT(out, Catch::Contains("host: cudaStreamSynchronize (300 us)"));
}

}  // namespace
}  // namespace deltatune::daemon
