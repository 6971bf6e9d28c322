// Durable job state in SQLite (WAL): jobs (spec and status as serialized protos, plus the columns
// queries filter on), events with their per-job sequence, checkpoints, and a unique request_id
// index. Every mutation is one transaction, so a crash leaves either all of a change or none.
// Thread-safe: one connection behind a mutex (the daemon's write rate is a few per second).
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deltatune/v1/job.pb.h"

struct sqlite3;

namespace deltatune::daemon {

// A rank process as recorded for orphan clean-up after a daemon crash. start_ticks (field 22 of
// /proc/<pid>/stat) guards against killing an unrelated process that reused the pid.
struct RankPid {
    int rank = 0;
    pid_t pid = 0;
    uint64_t start_ticks = 0;
    // Set for a rank a node agent runs: pid and start_ticks are then 0 and the rank is stopped
    // through the agent, never by a local signal.
    std::string agent_id;
};

struct StoredJob {
    std::string id;                  // the {id} of "jobs/{id}"
    int64_t create_seq = 0;          // creation order (FIFO tie-break, page tokens)
    v1::Job job;                     // the whole resource, spec included
    int64_t last_sequence = 0;       // highest event sequence written
    int32_t fault_count = 0;         // recoveries used, against spec.max_restarts
    std::vector<RankPid> rank_pids;  // live ranks of the current attempt
};

class JobStore {
  public:
    // Opens (creating) the database at `path` and its schema.
    static absl::StatusOr<std::unique_ptr<JobStore>> open(const std::string& path);
    ~JobStore();
    JobStore(const JobStore&) = delete;
    JobStore& operator=(const JobStore&) = delete;

    // Upserts the job row and appends `events` and `checkpoints` in one transaction. A new row
    // whose request_id is taken fails with ALREADY_EXISTS.
    absl::Status save(const StoredJob& job, const std::vector<v1::JobEvent>& events = {},
                      const std::vector<v1::Checkpoint>& checkpoints = {});
    absl::StatusOr<std::vector<StoredJob>> load_all();
    // Events of `id` with sequence > after, ascending; `type` filters when non-empty.
    absl::StatusOr<std::vector<v1::JobEvent>> events(const std::string& id, int64_t after,
                                                     int limit, const std::string& type = "");
    absl::StatusOr<std::vector<v1::Checkpoint>> checkpoints(const std::string& id);
    // Removes the job with its events and checkpoints.
    absl::Status remove(const std::string& id);
    int64_t max_create_seq();

  private:
    explicit JobStore(sqlite3* db) : db_(db) {}
    absl::Status exec(const char* sql);

    std::mutex mu_;
    sqlite3* db_;
};

}  // namespace deltatune::daemon
