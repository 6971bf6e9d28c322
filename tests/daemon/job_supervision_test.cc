// Rank supervision with fake ranks (tests/daemon/fake_rank.cc): success with export and
// checkpoints, cancel in QUEUED and RUNNING (with SIGKILL escalation), pause/resume from a
// checkpoint, rank crashes -> RECOVERING -> relaunch, MAX_RESTARTS_EXCEEDED, heartbeat loss,
// exit code 2, and daemon restarts (graceful and crash) that keep and resume jobs.
#include <catch2/catch.hpp>

#include "daemon/jobs/rank_launcher.h"
#include "daemon/store/job_store.h"
#include "tests/daemon/daemon_test_util.h"

namespace deltatune::daemon::testing {
namespace {

std::vector<std::string> types_of(const std::vector<v1::JobEvent>& events) {
    std::vector<std::string> out;
    for (const auto& e : events) out.push_back(e.type());
    return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

grpc::Status transition(TestDaemon& d, const std::string& what, const std::string& name, Job* out) {
    if (what == "cancel") {
        v1::CancelJobRequest r;
        r.set_name(name);
        return d.stub().CancelJob(ctx().get(), r, out);
    }
    if (what == "pause") {
        v1::PauseJobRequest r;
        r.set_name(name);
        return d.stub().PauseJob(ctx().get(), r, out);
    }
    v1::ResumeJobRequest r;
    r.set_name(name);
    return d.stub().ResumeJob(ctx().get(), r, out);
}

std::vector<RankPid> stored_pids(const DaemonConfig& c, const std::string& name) {
    auto store = JobStore::open(c.state_dir + "/jobs.db");
    REQUIRE(store.ok());
    auto jobs = (*store)->load_all();
    REQUIRE(jobs.ok());
    for (const StoredJob& j : *jobs) {
        if (j.job.name() == name) return j.rank_pids;
    }
    return {};
}

TEST_CASE("a job runs to SUCCEEDED with its export and checkpoints", "[daemon][ranks]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    v1::JobSpec spec = fake_spec("run", "train", 10);
    spec.mutable_checkpoint()->set_every_n_steps(5);
    Job job;
    REQUIRE(create(d, spec, &job).ok());
    job = wait_state(d, job.name(), Job::SUCCEEDED);
    REQUIRE(job.state() == Job::SUCCEEDED);
    CHECK(job.result_model() == dir.file("outputs/run/export"));
    CHECK(job.progress().step() == 10);
    CHECK(job.latest_metrics().at("loss") == Approx(0.1));
    CHECK(job.has_start_time());
    CHECK(job.has_end_time());
    const auto types = types_of(all_events(d, job.name()));
    CHECK(types.front() == "JOB_CREATED");
    CHECK(has(types, "ADMITTED"));
    CHECK(has(types, "TRAINING_STARTED"));
    CHECK(has(types, "EXPORT_COMPLETED"));
    CHECK(types.back() == "SUCCEEDED");
    v1::ListCheckpointsRequest req;
    req.set_name(job.name());
    v1::ListCheckpointsResponse cps;
    REQUIRE(d.stub().ListCheckpoints(ctx().get(), req, &cps).ok());
    REQUIRE(cps.checkpoints_size() == 2);
    CHECK(cps.checkpoints(0).step() == 5);
    CHECK(cps.checkpoints(1).step() == 10);
    CHECK(cps.next_page_token().empty());
    // A page at a time, as the other lists page.
    req.set_page_size(1);
    REQUIRE(d.stub().ListCheckpoints(ctx().get(), req, &cps).ok());
    REQUIRE(cps.checkpoints_size() == 1);
    CHECK(cps.checkpoints(0).step() == 5);
    REQUIRE_FALSE(cps.next_page_token().empty());
    req.set_page_token(cps.next_page_token());
    REQUIRE(d.stub().ListCheckpoints(ctx().get(), req, &cps).ok());
    REQUIRE(cps.checkpoints_size() == 1);
    CHECK(cps.checkpoints(0).step() == 10);
    CHECK(cps.next_page_token().empty());
    req.set_page_token("garbage");
    CHECK(d.stub().ListCheckpoints(ctx().get(), req, &cps).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(std::filesystem::exists(
        dir.file("state/jobs/" + job.name().substr(5) + "/attempt-0/rank-0.log")));
}

TEST_CASE("cancel in QUEUED and in RUNNING, even when the rank ignores SIGTERM",
          "[daemon][ranks]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    Job running, queued, out;
    REQUIRE(create(d, fake_spec("a", "ignore_term"), &running).ok());
    REQUIRE(create(d, fake_spec("b"), &queued).ok());
    REQUIRE(wait_for(d, running.name(), [](const Job& j) {
                return j.progress().step() >= 1;
            }).state() == Job::RUNNING);
    CHECK(get(d, queued.name()).queue_position() == 1);
    REQUIRE(transition(d, "cancel", queued.name(), &out).ok());
    CHECK(out.state() == Job::CANCELLED);

    const auto pids = stored_pids(d.config(), running.name());
    REQUIRE(pids.size() == 1);
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(transition(d, "cancel", running.name(), &out).ok());
    CHECK((out.state() == Job::CANCELLING || out.state() == Job::CANCELLED));
    out = wait_state(d, running.name(), Job::CANCELLED, 5);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(out.state() == Job::CANCELLED);
    CHECK(out.state_reason() == "CANCELLED_BY_USER");
    CHECK(took < 3);  // SIGTERM ignored: SIGKILL after rank_term_grace_seconds (0.5 s)
    CHECK_FALSE(rank_process_alive(pids[0]));
    CHECK(stored_pids(d.config(), running.name()).empty());
    CHECK(transition(d, "cancel", running.name(), &out).ok());  // idempotent
}

TEST_CASE("pause -> PAUSED -> resume -> QUEUED resumes from the checkpoint", "[daemon][ranks]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    Job job, out;
    REQUIRE(create(d, fake_spec("p", "train", 30), &job).ok());
    wait_for(d, job.name(), [](const Job& j) { return j.progress().step() >= 5; });
    REQUIRE(transition(d, "pause", job.name(), &out).ok());
    CHECK((out.state() == Job::PAUSING || out.state() == Job::PAUSED));
    job = wait_state(d, job.name(), Job::PAUSED);
    REQUIRE(job.state() == Job::PAUSED);
    const int64_t paused_at = job.progress().step();
    CHECK(paused_at >= 5);
    CHECK(job.latest_checkpoint() == dir.file("outputs/p/fake-ckpt-0"));
    CHECK(transition(d, "cancel", "jobs/unknown", &out).error_code() ==
          grpc::StatusCode::NOT_FOUND);

    REQUIRE(transition(d, "resume", job.name(), &out).ok());
    CHECK(out.state() == Job::QUEUED);
    CHECK(out.attempt() == 1);
    job = wait_state(d, job.name(), Job::SUCCEEDED);
    REQUIRE(job.state() == Job::SUCCEEDED);
    const auto events = all_events(d, job.name(), "TRAINING_STARTED");
    REQUIRE(events.size() == 2);
    CHECK(events[1].attempt() == 1);
    CHECK(events[1].details().at("resumed_from_step") == std::to_string(paused_at));
    CHECK(all_events(d, job.name(), "STEP_METRICS").size() == 30);  // no step lost or repeated
}

TEST_CASE("a rank that exits non-zero goes RECOVERING and is relaunched", "[daemon][ranks]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    Job job;
    REQUIRE(create(d, fake_spec("c", "crash_once", 5), &job).ok());
    job = wait_state(d, job.name(), Job::SUCCEEDED);
    REQUIRE(job.state() == Job::SUCCEEDED);
    CHECK(job.attempt() == 1);
    const auto faults = all_events(d, job.name(), "FAULT_DETECTED");
    REQUIRE(faults.size() == 1);
    CHECK(faults[0].details().at("kind") == "RANK_EXITED");
    CHECK(faults[0].details().at("rank") == "0");
    CHECK(faults[0].message() == "rank 0 exited with code 3");
    const auto types = types_of(all_events(d, job.name()));
    const auto at = [&](const std::string& t) { return std::find(types.begin(), types.end(), t); };
    CHECK(at("FAULT_DETECTED") < at("RECOVERY_STARTED"));
    CHECK(at("RECOVERY_STARTED") < at("RECOVERY_COMPLETED"));
}

TEST_CASE("repeated crashes end FAILED with MAX_RESTARTS_EXCEEDED, which resumes",
          "[daemon][ranks]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    v1::JobSpec spec = fake_spec("m", "crash");
    spec.set_max_restarts(2);
    Job job, out;
    REQUIRE(create(d, spec, &job).ok());
    job = wait_state(d, job.name(), Job::FAILED);
    REQUIRE(job.state() == Job::FAILED);
    CHECK(job.state_reason() == "MAX_RESTARTS_EXCEEDED");
    CHECK_THAT(job.error_message(), Catch::Contains("gave up after 2 restarts"));
    CHECK(all_events(d, job.name(), "FAULT_DETECTED").size() == 3);
    REQUIRE(transition(d, "resume", job.name(), &out).ok());
    CHECK(out.state() == Job::QUEUED);
}

TEST_CASE("a rank's own reason and message become the job's fault and error", "[daemon][ranks]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    v1::JobSpec spec = fake_spec("e", "error_crash");
    spec.set_max_restarts(1);
    Job job;
    REQUIRE(create(d, spec, &job).ok());
    job = wait_state(d, job.name(), Job::FAILED);
    REQUIRE(job.state() == Job::FAILED);
    const auto faults = all_events(d, job.name(), "FAULT_DETECTED");
    REQUIRE(faults.size() == 2);
    CHECK(faults[0].details().at("kind") == "OUT_OF_MEMORY");
    CHECK(faults[0].message() == "rank 0 exited with code 1: step 3: cannot allocate 2.0 GiB");
    CHECK_THAT(job.error_message(),
               Catch::Contains("last fault: rank 0 exited with code 1: step 3: "
                               "cannot allocate 2.0 GiB"));
}

TEST_CASE("a silent rank is killed: HEARTBEAT_LOST", "[daemon][ranks]") {
    TempDir dir;
    DaemonConfig config = test_config(dir);
    config.heartbeat_timeout_seconds = 0.6;
    TestDaemon d(config);
    v1::JobSpec spec = fake_spec("h", "hang");
    spec.set_max_restarts(1);  // over gRPC, 0 would mean "the default" (3)
    Job job;
    REQUIRE(create(d, spec, &job).ok());
    job = wait_state(d, job.name(), Job::FAILED, 8);
    REQUIRE(job.state() == Job::FAILED);
    CHECK(job.state_reason() == "MAX_RESTARTS_EXCEEDED");
    const auto faults = all_events(d, job.name(), "FAULT_DETECTED");
    REQUIRE(faults.size() == 2);
    CHECK(faults[0].details().at("kind") == "HEARTBEAT_LOST");
    CHECK(faults[1].attempt() == 1);
    CHECK(faults[0].details().at("rank") == "0");
}

TEST_CASE("exit code 2 fails the job with the rank's reason, without retry", "[daemon][ranks]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    Job job;
    REQUIRE(create(d, fake_spec("i", "invalid"), &job).ok());
    job = wait_state(d, job.name(), Job::FAILED);
    REQUIRE(job.state() == Job::FAILED);
    CHECK(job.state_reason() == "DATASET_FORMAT_INVALID");
    CHECK(job.error_message() == "train.jsonl:3: not a JSON object");
    CHECK(job.attempt() == 0);
    CHECK(all_events(d, job.name(), "FAULT_DETECTED").empty());
}

TEST_CASE("daemon restart keeps queued jobs and re-queues running ones", "[daemon][restart]") {
    TempDir dir;
    const DaemonConfig config = test_config(dir);
    std::string running, queued;
    int64_t step_before = 0;
    {
        TestDaemon d(config);
        Job a, b;
        REQUIRE(create(d, fake_spec("ra", "train", 60), &a).ok());
        REQUIRE(create(d, fake_spec("rb", "train", 5), &b).ok());
        running = a.name();
        queued = b.name();
        wait_for(d, running, [](const Job& j) { return j.progress().step() >= 3; });
        d.stop(std::chrono::seconds(5));  // SIGTERM: ranks checkpoint and exit
    }
    {
        auto store = JobStore::open(config.state_dir + "/jobs.db");
        REQUIRE(store.ok());
        auto jobs = (*store)->load_all();
        REQUIRE(jobs.ok());
        REQUIRE(jobs->size() == 2);
        CHECK((*jobs)[0].job.state() == Job::QUEUED);
        CHECK((*jobs)[0].job.attempt() == 1);
        CHECK((*jobs)[1].job.state() == Job::QUEUED);
        step_before = (*jobs)[0].job.progress().step();
    }
    TestDaemon d(config);
    Job a = wait_state(d, running, Job::SUCCEEDED, 15);
    REQUIRE(a.state() == Job::SUCCEEDED);
    const auto started = all_events(d, running, "TRAINING_STARTED");
    REQUIRE(started.size() == 2);
    CHECK(std::stoll(started[1].details().at("resumed_from_step")) == step_before);
    CHECK(wait_state(d, queued, Job::SUCCEEDED).state() == Job::SUCCEEDED);
    const auto events = all_events(d, running);
    for (size_t i = 0; i < events.size(); ++i) {
        CHECK(events[i].sequence() == static_cast<int64_t>(i) + 1);
    }
}

TEST_CASE("after a daemon crash, orphaned ranks are killed and jobs resume", "[daemon][restart]") {
    TempDir dir;
    const DaemonConfig config = test_config(dir);
    std::string name;
    {
        TestDaemon d(config);
        Job a;
        REQUIRE(create(d, fake_spec("x", "train", 1000000), &a).ok());
        name = a.name();
        wait_for(d, name, [](const Job& j) { return j.progress().step() >= 2; });
        d.crash();
    }
    const auto orphans = stored_pids(config, name);
    REQUIRE(orphans.size() == 1);
    CHECK(rank_process_alive(orphans[0]));  // still retrying its dead supervisor
    TestDaemon d(config);
    CHECK_FALSE(rank_process_alive(orphans[0]));
    Job job = wait_for(d, name,
                       [](const Job& j) { return j.attempt() == 1 && j.state() == Job::RUNNING; });
    CHECK(job.state() == Job::RUNNING);
    CHECK(job.attempt() == 1);
    const auto requeued = all_events(d, name, "QUEUED");
    REQUIRE(requeued.size() == 2);
    CHECK(requeued[1].details().at("reason") == "DAEMON_RESTART");
}

}  // namespace
}  // namespace deltatune::daemon::testing
