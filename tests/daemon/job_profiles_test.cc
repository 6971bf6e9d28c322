// ProfileJob / GetProfile through the daemon with fake ranks (fake_rank.cc answers a profile
// order with a file and a PROFILE_COMPLETED event): the order reaches rank 0 once, the daemon
// reads the profile from the path it derives itself (never through a link a rank planted), and
// the refusals say why. The CUPTI side runs on the GPU (scripts/gpu/gpu_train.sh).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/common/test_util.h"
#include "tests/daemon/daemon_test_util.h"

namespace deltatune::daemon::testing {
namespace {

// A daemon with one "GPU" and a real model config, so a GPU job passes validation here; every
// op may run its reference kernel (this machine has no GPU). The ranks are fake.
struct GpuDaemon {
    TempDir dir;
    DaemonConfig config = test_config(dir);
    GpuDaemon() {
        config.gpus = 1;
        std::filesystem::create_directories(dir.file("models/gpu"));
        std::filesystem::copy_file(::deltatune::testing::source_path("configs/models/tiny-a.json"),
                                   dir.file("models/gpu/config.json"));
    }
};

v1::JobSpec gpu_spec(const std::string& output) {
    v1::JobSpec s = fake_spec(output);
    s.set_model("gpu");
    s.mutable_resources()->set_gpus(1);
    for (const char* op :
         {"swiglu", "linear", "adamw", "gated_attention", "embedding", "l2norm", "gated_rmsnorm",
          "qk_norm_rope", "fused_linear_cross_entropy", "gated_delta_rule", "grad_norm",
          "rmsnorm_residual", "gdn_gates", "causal_conv1d"}) {
        s.mutable_kernels()->add_allow_non_fused(op);
    }
    return s;
}

grpc::Status order(TestDaemon& d, const std::string& name, int steps, std::string* id) {
    v1::ProfileJobRequest req;
    req.set_name(name);
    req.set_steps(steps);
    v1::ProfileJobResponse resp;
    const grpc::Status s = d.stub().ProfileJob(ctx().get(), req, &resp);
    *id = resp.profile_id();
    return s;
}

// Polls GetProfile until it answers anything but NOT_FOUND (or 10 s pass).
grpc::Status fetch(TestDaemon& d, const std::string& name, const std::string& id,
                   v1::Profile* out) {
    v1::GetProfileRequest req;
    req.set_name(name);
    req.set_profile_id(id);
    grpc::Status s;
    for (int i = 0; i < 200; ++i) {
        s = d.stub().GetProfile(ctx().get(), req, out);
        if (s.error_code() != grpc::StatusCode::NOT_FOUND) return s;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return s;
}

// DownloadProfile's pieces, in order and at most 1 MiB each, joined; `pieces` counts them.
grpc::Status download(TestDaemon& d, const std::string& name, const std::string& id,
                      std::string* bytes, int* pieces) {
    v1::GetProfileRequest req;
    req.set_name(name);
    req.set_profile_id(id);
    auto c = ctx();
    auto reader = d.stub().DownloadProfile(c.get(), req);
    v1::ProfileChunk chunk;
    *pieces = 0;
    while (reader->Read(&chunk)) {
        CHECK(chunk.offset() == static_cast<int64_t>(bytes->size()));
        CHECK(chunk.data().size() <= (1u << 20));
        *bytes += chunk.data();
        ++*pieces;
    }
    return reader->Finish();
}

TEST_CASE("a running GPU job's profile reaches rank 0 and comes back", "[daemon][profile]") {
    GpuDaemon g;
    TestDaemon d(g.config);
    Job job;
    const grpc::Status created = create(d, gpu_spec("prof"), &job);
    INFO(created.error_message());
    REQUIRE(created.ok());
    wait_state(d, job.name(), Job::RUNNING);
    std::string id;
    REQUIRE(order(d, job.name(), 2, &id).ok());
    v1::Profile p;
    const grpc::Status got = fetch(d, job.name(), id, &p);
    INFO(got.error_message());
    REQUIRE(got.ok());
    CHECK(p.profile_id() == id);
    CHECK(p.steps() == 2);
    REQUIRE(p.kernels_size() == 1);
    CHECK(p.kernels(0).name() == "fake_kernel");
    CHECK(p.trace_json() == "{\"traceEvents\": []}");
    std::string streamed;
    int pieces = 0;
    REQUIRE(download(d, job.name(), id, &streamed, &pieces).ok());
    CHECK(pieces == 1);
    CHECK(streamed == p.SerializeAsString());
    // Ordered once: a second profile is a new order with its own id.
    std::string second;
    REQUIRE(order(d, job.name(), 0, &second).ok());
    CHECK(second != id);
    REQUIRE(fetch(d, job.name(), second, &p).ok());
    CHECK(p.steps() == 3);  // the default
    // Refusals: out-of-range steps, a malformed or unknown id.
    CHECK(order(d, job.name(), 101, &id).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    v1::GetProfileRequest req;
    req.set_name(job.name());
    req.set_profile_id("../../etc/passwd");
    CHECK(d.stub().GetProfile(ctx().get(), req, &p).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
    req.set_profile_id("abc123");
    CHECK(d.stub().GetProfile(ctx().get(), req, &p).error_code() == grpc::StatusCode::NOT_FOUND);
    // The CLI: orders, waits, writes the trace and prints the kernel table.
    std::string out;
    const std::string trace = g.dir.file("trace.json");
    CHECK(::deltatune::testing::run_command(::deltatune::testing::cli_path() + " profile " +
                                                job.name() + " --steps 2 --out " + trace +
                                                " --address " + d.address() + " 2>&1",
                                            out) == 0);
    CHECK_THAT(out, Catch::Contains("fake_kernel") && Catch::Contains("trace: " + trace));
    std::ifstream in(trace);
    CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "{\"traceEvents\": []}");
}

TEST_CASE("a profile past 64 MiB streams in 1 MiB pieces", "[daemon][profile]") {
    GpuDaemon g;
    TestDaemon d(g.config);
    v1::JobSpec spec = gpu_spec("huge");
    (*spec.mutable_labels())["fake_profile"] = "huge";
    Job job;
    REQUIRE(create(d, spec, &job).ok());
    wait_state(d, job.name(), Job::RUNNING);
    std::string id;
    REQUIRE(order(d, job.name(), 1, &id).ok());
    v1::Profile p;
    const grpc::Status one = fetch(d, job.name(), id, &p);
    CHECK(one.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(one.error_message(),
               Catch::Contains("65 MiB") && Catch::Contains("DownloadProfile"));
    std::string bytes;
    int pieces = 0;
    const grpc::Status streamed = download(d, job.name(), id, &bytes, &pieces);
    INFO(streamed.error_message());
    REQUIRE(streamed.ok());
    CHECK(pieces == 66);
    REQUIRE(p.ParseFromString(bytes));
    CHECK(p.profile_id() == id);
    CHECK(p.trace_json().size() == (65u << 20) + 19);
    // Errors come as the stream's status: a malformed id, an unknown job.
    CHECK(download(d, job.name(), "../x", &bytes, &pieces).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(download(d, "jobs/nope", id, &bytes, &pieces).error_code() ==
          grpc::StatusCode::NOT_FOUND);
    // The CLI fetches it whole.
    std::string out;
    const std::string trace = g.dir.file("huge.json");
    CHECK(::deltatune::testing::run_command(::deltatune::testing::cli_path() + " profile " +
                                                job.name() + " --steps 1 --out " + trace +
                                                " --address " + d.address() + " 2>&1",
                                            out) == 0);
    INFO(out);
    CHECK(std::filesystem::file_size(trace) == (65u << 20) + 19);
}

TEST_CASE("profiles are refused for CPU jobs and jobs not running", "[daemon][profile]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    Job job;
    REQUIRE(create(d, fake_spec("cpu"), &job).ok());
    wait_state(d, job.name(), Job::RUNNING);
    std::string id;
    const grpc::Status s = order(d, job.name(), 2, &id);
    CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(s.error_message().find("CPU ranks") != std::string::npos);
    Job cancelled;
    v1::CancelJobRequest cancel;
    cancel.set_name(job.name());
    REQUIRE(d.stub().CancelJob(ctx().get(), cancel, &cancelled).ok());
    wait_state(d, job.name(), Job::CANCELLED);
    const grpc::Status after = order(d, job.name(), 2, &id);
    CHECK(after.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(after.error_message().find("CANCELLED") != std::string::npos);
    CHECK(order(d, "jobs/nope", 2, &id).error_code() == grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("a profile file a rank linked elsewhere is not read", "[daemon][profile]") {
    GpuDaemon g;
    TestDaemon d(g.config);
    v1::JobSpec spec = gpu_spec("linked");
    (*spec.mutable_labels())["fake_profile"] = "symlink";
    Job job;
    REQUIRE(create(d, spec, &job).ok());
    wait_state(d, job.name(), Job::RUNNING);
    std::string id;
    REQUIRE(order(d, job.name(), 1, &id).ok());
    // Wait for the rank's event, then ask: the link is refused, never followed.
    for (int i = 0; i < 200; ++i) {
        bool done = false;
        for (const auto& e : all_events(d, job.name())) done |= e.type() == "PROFILE_COMPLETED";
        if (done) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    v1::Profile p;
    v1::GetProfileRequest req;
    req.set_name(job.name());
    req.set_profile_id(id);
    const grpc::Status s = d.stub().GetProfile(ctx().get(), req, &p);
    CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK(p.trace_json().empty());
}

}  // namespace
}  // namespace deltatune::daemon::testing
