// JobManager: the job lifecycle as a domain object (no gRPC types; the services are adapters).
// It owns the store, the scheduler thread (priority, then FIFO; at most max_concurrent_jobs
// active), rank supervision through RankLauncher, and the AIP-216 state machine:
//
//   create -> QUEUED -> PENDING (ranks spawned) -> RUNNING (first report) -> SUCCEEDED
//   fault (rank exit, HEARTBEAT_LOST) -> RECOVERING (attempt+1, relaunch) -> RUNNING
//                                     \-> FAILED MAX_RESTARTS_EXCEEDED after spec.max_restarts
//   cancel: QUEUED/PAUSED -> CANCELLED; PENDING/RUNNING/RECOVERING/PAUSING -> CANCELLING ->
//   CANCELLED pause:  QUEUED -> PAUSED; PENDING/RUNNING/RECOVERING -> PAUSING -> PAUSED; resume:
//   PAUSED -> QUEUED delete: SUCCEEDED/FAILED/CANCELLED only
// Any other transition is FAILED_PRECONDITION naming both states; cancel and pause repeat
// idempotently. Every change commits the job row and its events in one store transaction.
// Thread-safe; listeners are called with no lock held after every change.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/daemon_config.h"
#include "daemon/config/job_yaml.h"
#include "daemon/jobs/rank_launcher.h"
#include "daemon/jobs/remote_ranks.h"
#include "daemon/store/job_store.h"
#include "deltatune/v1/job.pb.h"
#include "deltatune/v1/rank.pb.h"
#include "deltatune/v1/service.pb.h"
#include "runtime/base/path_sandbox.h"

namespace deltatune::daemon {

struct JobManagerOptions {
    std::string state_dir;  // holds jobs.db, deltatuned.lock and jobs/<id>/attempt-<n>/
    PathRoots roots;
    InputLimits limits;
    int max_concurrent_jobs = 1;
    std::chrono::milliseconds heartbeat_timeout{60000};
    std::chrono::milliseconds rank_term_grace{2000};
    std::string rank_executable;  // absolute path, run as `<exe> rank ...`
    std::string rank_supervisor;  // the address ranks report to, "unix:<state_dir>/rank.sock"
    int64_t gpu_memory_bytes = int64_t{141} << 30;  // one GPU, for the memory planner
    int gpus = 0;   // GPUs the ranks may use (a GPU job asking for more is refused)
    CpuBudget cpu;  // what CPU jobs are admitted against
};

// Options from the daemon config; rank_executable defaults to this process's binary.
JobManagerOptions job_manager_options(const DaemonConfig& config);

class JobManager {
  public:
    struct ListRequest {
        int page_size = 0;  // 0 = 50, capped at 1000, negative is INVALID_ARGUMENT
        std::string page_token;
        v1::Job::State state = v1::Job::STATE_UNSPECIFIED;  // filter; unspecified = any
        std::map<std::string, std::string> labels;          // each must match
    };
    struct ListResult {
        std::vector<v1::Job> jobs;
        std::string next_page_token;
    };
    struct EventsRequest {
        std::string name;
        int page_size = 0;  // 0 = 100, capped at 1000
        std::string page_token;
        int64_t min_sequence = 0;  // inclusive
        std::string type;          // filter when non-empty
    };
    struct EventsResult {
        std::vector<v1::JobEvent> events;
        std::string next_page_token;
    };
    // What a stream needs to decide whether to read: bumped on every change of the job.
    struct Cursor {
        uint64_t version = 0;
        int64_t last_sequence = 0;
        bool terminal = false;
    };

    // Opens the store, takes the state_dir lock, and re-queues jobs orphaned by a previous daemon
    // (killing their recorded ranks). Nothing is launched before start().
    static absl::StatusOr<std::unique_ptr<JobManager>> open(JobManagerOptions options);
    struct Impl;    // job_manager_impl.h; public only so the implementation files can name it
    ~JobManager();  // shutdown({}) unless already shut down or abandoned
    JobManager(const JobManager&) = delete;
    JobManager& operator=(const JobManager&) = delete;

    void start();  // starts the scheduler

    // `name` arguments accept "jobs/{id}" or "{id}".
    absl::StatusOr<v1::Job> create_job(v1::JobSpec spec, const std::string& request_id,
                                       bool validate_only);
    absl::StatusOr<v1::Job> get_job(const std::string& name);
    absl::StatusOr<ListResult> list_jobs(const ListRequest& request);
    absl::StatusOr<v1::Job> cancel_job(const std::string& name);
    absl::StatusOr<v1::Job> pause_job(const std::string& name);
    absl::StatusOr<v1::Job> resume_job(const std::string& name);
    absl::Status delete_job(const std::string& name);
    absl::StatusOr<EventsResult> list_events(const EventsRequest& request);
    absl::StatusOr<std::vector<v1::JobEvent>> events_after(const std::string& name, int64_t after,
                                                           int limit);
    // The job's committed checkpoints that still exist, by step, a page at a time (page_size 0:
    // 100; a token from the previous page's next_page_token, empty after the last page).
    struct CheckpointsResult {
        std::vector<v1::Checkpoint> checkpoints;
        std::string next_page_token;
    };
    absl::StatusOr<CheckpointsResult> list_checkpoints(const std::string& name, int page_size = 0,
                                                       const std::string& page_token = "");
    absl::StatusOr<Cursor> cursor(const std::string& name);

    // `fn` runs after any change, on the changing thread, with no manager lock held: keep it cheap.
    int add_listener(std::function<void()> fn);
    void remove_listener(int id);

    // The rank protocol: applies a report and says what the rank must do next.
    v1::RankDirective on_rank_report(const v1::RankReport& report);

    // Node agents (remote_placement.cc). Set before start(): jobs with resources.nodes are placed
    // on `remote`'s live agents; without it they fail at launch.
    void set_remote_ranks(RemoteRanks* remote);
    // A rank that ended on an agent; ignored unless that agent runs that rank of the attempt.
    void on_remote_rank_exit(const std::string& agent_id, const v1::RemoteRankExit& exit);
    // True when the job's current attempt has `rank` (any rank: -1) on the agent: the relay
    // answers only for those.
    bool placed_on(const std::string& agent_id, const std::string& job, int attempt,
                   int rank) const;

    // Profiles (job_profiles.cc): orders rank 0 of a RUNNING GPU job to trace its next `steps`
    // steps (0: 3; at most 100); returns the profile's id. FailedPrecondition for a job that is
    // not running, trains on CPU ranks, or has a profile ordered and not yet picked up.
    absl::StatusOr<std::string> request_profile(const std::string& name, int steps);
    // A finished profile's file in the job's output folder (the path the daemon derives, never
    // one a rank reported), open for reading. NotFound until the job's PROFILE_COMPLETED event.
    struct ProfileFile {
        UniqueFd fd;
        int64_t bytes = 0;
        std::string path;
    };
    absl::StatusOr<ProfileFile> open_profile(const std::string& name, const std::string& id);
    // The same, read and parsed: FailedPrecondition past 64 MiB (DownloadProfile streams those).
    absl::StatusOr<v1::Profile> get_profile(const std::string& name, const std::string& id);
    // The rendezvous store of a running attempt; FailedPrecondition for any other attempt.
    absl::Status store_set(const std::string& job, int attempt, const std::string& key,
                           std::string value);
    absl::StatusOr<std::optional<std::string>> store_get(const std::string& job, int attempt,
                                                         const std::string& key);

    // Daemon shutdown: stop admitting, ask running ranks to checkpoint and exit, wait up to
    // `grace`, kill what is left, and leave every job QUEUED/PAUSED/terminal so a restart resumes.
    void shutdown(std::chrono::milliseconds grace);
    // Tests: stop threads as if the daemon had crashed; ranks and the store stay as they are.
    void abandon_for_test();

  private:
    explicit JobManager(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

bool is_terminal(v1::Job::State state);
// The states of an admitted job: it holds a scheduler slot and the GPUs it asked for while its
// ranks start, run, recover or are being stopped.
bool holds_resources(v1::Job::State state);

// The wall clock to the microsecond (protobuf 3.21's TimeUtil::GetCurrentTime has whole seconds).
inline google::protobuf::Timestamp now_timestamp() {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    google::protobuf::Timestamp t;
    t.set_seconds(us / 1000000);
    t.set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
    return t;
}

}  // namespace deltatune::daemon
