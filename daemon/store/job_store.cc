// SQLite job store. The UPSERT is ON CONFLICT DO UPDATE, never REPLACE: REPLACE deletes the row
// first, and the ON DELETE CASCADE would take the job's events and checkpoints with it.
#include "daemon/store/job_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdio>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs(
    id TEXT PRIMARY KEY,
    create_seq INTEGER NOT NULL,
    state INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    request_id TEXT,
    spec BLOB NOT NULL,
    status BLOB NOT NULL,
    last_sequence INTEGER NOT NULL,
    fault_count INTEGER NOT NULL,
    rank_pids TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_request_id ON jobs(request_id) WHERE request_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, priority, create_seq);
CREATE TABLE IF NOT EXISTS events(
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL,
    type TEXT NOT NULL,
    event BLOB NOT NULL,
    PRIMARY KEY(job_id, sequence)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints(
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    checkpoint BLOB NOT NULL,
    PRIMARY KEY(job_id, step)) WITHOUT ROWID;
)sql";

// A prepared statement that finalizes itself.
class Stmt {
  public:
    Stmt(sqlite3* db, const char* sql) : db_(db) {
        rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
    }
    ~Stmt() { sqlite3_finalize(s_); }
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;

    Stmt& bind(int i, int64_t v) { return check(sqlite3_bind_int64(s_, i, v)); }
    Stmt& bind(int i, const std::string& v) {
        return check(
            sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
    Stmt& bind_blob(int i, const std::string& v) {
        return check(
            sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
    Stmt& bind_null(int i) { return check(sqlite3_bind_null(s_, i)); }
    // SQLITE_ROW, SQLITE_DONE, or an error code.
    int step() { return rc_ == SQLITE_OK ? sqlite3_step(s_) : rc_; }
    int64_t int_at(int i) { return sqlite3_column_int64(s_, i); }
    std::string text_at(int i) {
        const void* p = sqlite3_column_blob(s_, i);
        return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(s_, i)) : "";
    }
    absl::Status error(const char* what) const {
        const std::string msg = absl::StrCat("job store: ", what, ": ", sqlite3_errmsg(db_));
        if ((rc_ & 0xff) == SQLITE_CONSTRAINT || sqlite3_errcode(db_) == SQLITE_CONSTRAINT) {
            return absl::AlreadyExistsError(msg);
        }
        return absl::InternalError(msg);
    }
    absl::Status run(const char* what) {
        const int rc = step();
        if (rc == SQLITE_DONE || rc == SQLITE_ROW) return absl::OkStatus();
        rc_ = rc;
        return error(what);
    }

  private:
    Stmt& check(int rc) {
        if (rc_ == SQLITE_OK && rc != SQLITE_OK) rc_ = rc;
        return *this;
    }
    sqlite3* db_;
    sqlite3_stmt* s_ = nullptr;
    int rc_;
};

std::string encode_pids(const std::vector<RankPid>& pids) {
    std::string out;
    for (const RankPid& p : pids) {
        absl::StrAppend(&out, out.empty() ? "" : ";", p.rank, ":", p.pid, ":", p.start_ticks);
        if (!p.agent_id.empty()) absl::StrAppend(&out, ":", p.agent_id);
    }
    return out;
}

std::vector<RankPid> decode_pids(const std::string& s) {
    std::vector<RankPid> out;
    for (absl::string_view item : absl::StrSplit(s, ';', absl::SkipEmpty())) {
        RankPid p;
        unsigned long long ticks = 0;
        const std::string text(item);
        if (std::sscanf(text.c_str(), "%d:%d:%llu", &p.rank, &p.pid, &ticks) == 3) {
            p.start_ticks = ticks;
            const std::vector<std::string> parts = absl::StrSplit(text, ':');
            if (parts.size() == 4) p.agent_id = parts[3];
            out.push_back(p);
        }
    }
    return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::open(const std::string& path) {
    sqlite3* db = nullptr;
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
        const std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
        sqlite3_close(db);
        return absl::UnavailableError(absl::StrCat("job store ", path, ": ", msg));
    }
    std::unique_ptr<JobStore> store(new JobStore(db));
    // Specs name private paths; SQLite gives the -wal and -shm files the database's mode.
    ::chmod(path.c_str(), 0600);
    sqlite3_busy_timeout(db, 5000);
    // FULL: a job acknowledged to a client (and its request_id) must survive a power cut.
    DT_RETURN_IF_ERROR(store->exec("PRAGMA journal_mode=WAL"));
    DT_RETURN_IF_ERROR(store->exec("PRAGMA synchronous=FULL"));
    DT_RETURN_IF_ERROR(store->exec("PRAGMA foreign_keys=ON"));
    DT_RETURN_IF_ERROR(store->exec(kSchema));
    return store;
}

JobStore::~JobStore() {
    sqlite3_close(db_);
}

absl::Status JobStore::exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) == SQLITE_OK) return absl::OkStatus();
    const std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("job store: ", msg));
}

absl::Status JobStore::save(const StoredJob& job, const std::vector<v1::JobEvent>& events,
                            const std::vector<v1::Checkpoint>& checkpoints) {
    std::lock_guard<std::mutex> lock(mu_);
    DT_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
    absl::Status s = [&]() -> absl::Status {
        Stmt up(db_, R"sql(
            INSERT INTO jobs(id, create_seq, state, priority, request_id, spec, status,
                             last_sequence, fault_count, rank_pids)
            VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
            ON CONFLICT(id) DO UPDATE SET state=?3, priority=?4, spec=?6, status=?7,
                last_sequence=?8, fault_count=?9, rank_pids=?10)sql");
        v1::Job status = job.job;
        status.clear_spec();
        up.bind(1, job.id).bind(2, job.create_seq).bind(3, job.job.state());
        up.bind(4, job.job.spec().priority());
        job.job.request_id().empty() ? up.bind_null(5) : up.bind(5, job.job.request_id());
        up.bind_blob(6, job.job.spec().SerializeAsString())
            .bind_blob(7, status.SerializeAsString());
        up.bind(8, job.last_sequence).bind(9, job.fault_count).bind(10, encode_pids(job.rank_pids));
        DT_RETURN_IF_ERROR(up.run("save job"));
        for (const v1::JobEvent& e : events) {
            Stmt ins(db_, "INSERT INTO events(job_id, sequence, type, event) VALUES(?1,?2,?3,?4)");
            ins.bind(1, job.id).bind(2, e.sequence()).bind(3, e.type());
            DT_RETURN_IF_ERROR(ins.bind_blob(4, e.SerializeAsString()).run("append event"));
        }
        for (const v1::Checkpoint& c : checkpoints) {
            Stmt ins(db_, R"sql(INSERT INTO checkpoints(job_id, step, checkpoint) VALUES(?1,?2,?3)
                ON CONFLICT(job_id, step) DO UPDATE SET checkpoint=?3)sql");
            ins.bind(1, job.id).bind(2, c.step()).bind_blob(3, c.SerializeAsString());
            DT_RETURN_IF_ERROR(ins.run("add checkpoint"));
        }
        return absl::OkStatus();
    }();
    if (!s.ok()) {
        (void)exec("ROLLBACK");
        return s;
    }
    return exec("COMMIT");
}

absl::StatusOr<std::vector<StoredJob>> JobStore::load_all() {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt q(db_, R"sql(SELECT id, create_seq, spec, status, last_sequence, fault_count, rank_pids
                      FROM jobs ORDER BY create_seq)sql");
    std::vector<StoredJob> out;
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
        StoredJob j;
        j.id = q.text_at(0);
        j.create_seq = q.int_at(1);
        if (!j.job.ParseFromString(q.text_at(3)) ||
            !j.job.mutable_spec()->ParseFromString(q.text_at(2))) {
            return absl::DataLossError(absl::StrCat("job store: job ", j.id, " does not parse"));
        }
        j.last_sequence = q.int_at(4);
        j.fault_count = static_cast<int32_t>(q.int_at(5));
        j.rank_pids = decode_pids(q.text_at(6));
        out.push_back(std::move(j));
    }
    if (rc != SQLITE_DONE) return q.error("load jobs");
    return out;
}

absl::StatusOr<std::vector<v1::JobEvent>> JobStore::events(const std::string& id, int64_t after,
                                                           int limit, const std::string& type) {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt q(db_, R"sql(SELECT event FROM events WHERE job_id = ?1 AND sequence > ?2
                      AND (?3 = '' OR type = ?3) ORDER BY sequence LIMIT ?4)sql");
    q.bind(1, id).bind(2, after).bind(3, type).bind(4, limit);
    std::vector<v1::JobEvent> out;
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
        out.emplace_back();
        if (!out.back().ParseFromString(q.text_at(0))) {
            return absl::DataLossError(absl::StrCat("job store: an event of ", id, " is corrupt"));
        }
    }
    if (rc != SQLITE_DONE) return q.error("read events");
    return out;
}

absl::StatusOr<std::vector<v1::Checkpoint>> JobStore::checkpoints(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt q(db_, "SELECT checkpoint FROM checkpoints WHERE job_id = ?1 ORDER BY step");
    q.bind(1, id);
    std::vector<v1::Checkpoint> out;
    int rc;
    while ((rc = q.step()) == SQLITE_ROW) {
        out.emplace_back();
        if (!out.back().ParseFromString(q.text_at(0))) {
            return absl::DataLossError(
                absl::StrCat("job store: a checkpoint of ", id, " is corrupt"));
        }
    }
    if (rc != SQLITE_DONE) return q.error("read checkpoints");
    return out;
}

absl::Status JobStore::remove(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt del(db_, "DELETE FROM jobs WHERE id = ?1");
    return del.bind(1, id).run("delete job");
}

int64_t JobStore::max_create_seq() {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt q(db_, "SELECT COALESCE(MAX(create_seq), 0) FROM jobs");
    return q.step() == SQLITE_ROW ? q.int_at(0) : 0;
}

}  // namespace deltatune::daemon
