// The SQLite job store: WAL mode, round trips, a unique request_id, upserts that keep a job's
// events, and deletes that take its events and checkpoints along.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include "daemon/store/job_store.h"
#include "tests/common/test_util.h"

namespace deltatune::daemon {
namespace {

StoredJob job_row(const std::string& id, int64_t seq, const std::string& request_id) {
    StoredJob j;
    j.id = id;
    j.create_seq = seq;
    j.job.set_name("jobs/" + id);
    j.job.set_state(v1::Job::QUEUED);
    j.job.set_request_id(request_id);
    j.job.mutable_spec()->set_model("m");
    j.rank_pids = {{0, 1234, 99, {}}, {1, 1235, 100, {}}, {2, 0, 0, "agent-0f3a"}};
    return j;
}

v1::JobEvent event(int64_t seq, const std::string& type) {
    v1::JobEvent e;
    e.set_sequence(seq);
    e.set_type(type);
    return e;
}

TEST_CASE("job store round trip, request_id uniqueness and cascading deletes", "[daemon][store]") {
    deltatune::testing::TempDir dir;
    const std::string path = dir.file("jobs.db");
    {
        auto store = JobStore::open(path);
        REQUIRE(store.ok());
        StoredJob a = job_row("a", 1, "r1");
        a.last_sequence = 2;
        REQUIRE((*store)->save(a, {event(1, "JOB_CREATED"), event(2, "QUEUED")}).ok());
        CHECK((*store)->save(job_row("b", 2, "r1")).code() == absl::StatusCode::kAlreadyExists);
        REQUIRE((*store)->save(job_row("c", 3, "")).ok());
        REQUIRE((*store)->save(job_row("d", 4, "")).ok());  // empty request ids do not collide
        a.job.set_state(v1::Job::RUNNING);
        a.last_sequence = 3;
        v1::Checkpoint cp;
        cp.set_step(10);
        cp.set_path("/o/ckpt-10");
        REQUIRE((*store)->save(a, {event(3, "STEP_METRICS")}, {cp}).ok());
    }
    auto store = JobStore::open(path);  // reopened: everything persisted
    REQUIRE(store.ok());
    auto jobs = (*store)->load_all();
    REQUIRE(jobs.ok());
    REQUIRE(jobs->size() == 3);
    const StoredJob& a = (*jobs)[0];
    CHECK(a.id == "a");
    CHECK(a.job.state() == v1::Job::RUNNING);
    CHECK(a.job.spec().model() == "m");
    CHECK(a.last_sequence == 3);
    REQUIRE(a.rank_pids.size() == 3);
    CHECK(a.rank_pids[1].pid == 1235);
    CHECK(a.rank_pids[1].start_ticks == 100);
    CHECK(a.rank_pids[1].agent_id.empty());
    CHECK(a.rank_pids[2].agent_id == "agent-0f3a");  // a rank a node agent runs
    auto events = (*store)->events("a", 1, 10);
    REQUIRE(events.ok());
    REQUIRE(events->size() == 2);  // the upsert kept the earlier events
    CHECK((*events)[0].sequence() == 2);
    CHECK((*store)->events("a", 0, 10, "STEP_METRICS")->size() == 1);
    CHECK((*store)->checkpoints("a")->size() == 1);
    CHECK((*store)->max_create_seq() == 4);
    REQUIRE((*store)->remove("a").ok());
    CHECK((*store)->events("a", 0, 10)->empty());
    CHECK((*store)->checkpoints("a")->empty());
    CHECK((*store)->save(job_row("e", 5, "r1")).ok());  // the request_id is free again

    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &q, nullptr);
    REQUIRE(sqlite3_step(q) == SQLITE_ROW);
    CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, 0))) == "wal");
    sqlite3_finalize(q);
    sqlite3_close(db);
}

}  // namespace
}  // namespace deltatune::daemon
