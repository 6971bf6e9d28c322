// JobManager internals shared by job_manager.cc (the API) and job_supervisor.cc (scheduler,
// ranks, faults, shutdown). Everything here is guarded by Impl::mu unless said otherwise.
#pragma once

#include <google/protobuf/util/time_util.h>

#include <cstdio>

#include "daemon/jobs/job_manager.h"
#include "runtime/base/path_sandbox.h"

namespace deltatune::daemon {

using Clock = std::chrono::steady_clock;

// Why the current attempt is ending; decides the state once its last rank has exited.
// kDrain: a node agent of the attempt is shutting down; the job checkpoints and moves.
enum class Ending { kNone, kSucceeded, kCancel, kPause, kShutdown, kDrain, kFault, kInvalid };

struct Attempt {
    int number = 0;
    std::vector<RankPid> ranks;
    std::vector<bool> exited;
    std::vector<Clock::time_point> last_report;
    int alive = 0;
    Ending ending = Ending::kNone;
    bool all_zero = true;                            // every rank that exited so far exited 0
    std::string export_path;                         // from an EXPORT_COMPLETED event
    std::map<std::string, std::string> rendezvous;   // the ranks' store (StoreSet/StoreGet)
    std::map<std::string, std::string> agent_hosts;  // agent id -> hostname, of its ranks
    // A ProfileJob order for rank 0 that its next report picks up: (profile id, steps).
    std::optional<std::pair<std::string, int>> profile_order;
};

struct Record {
    StoredJob stored;
    std::optional<Attempt> attempt;  // set while rank processes exist
    uint64_t version = 0;
    int queue_position = 0;
    std::string last_error_reason;  // details["reason"] of the latest ERROR event
    std::string last_error_message;
    std::string waiting_for;  // why a job with resources.nodes cannot be placed yet (said once)
    std::vector<std::string> last_agents;  // the previous attempt's agents, in node order
};

// A pending mutation of one job: the next row plus the events and checkpoints committed with it.
struct Change {
    explicit Change(const StoredJob& current) : next(current) {}
    StoredJob next;
    std::vector<v1::JobEvent> events;
    std::vector<v1::Checkpoint> checkpoints;

    v1::JobEvent& add(const std::string& type, v1::JobEvent::Level level,
                      const std::string& message,
                      const std::map<std::string, std::string>& details = {});
    void set_state(v1::Job::State state, const std::string& reason = "",
                   const std::string& message = "");
};

// Supervision paths (rank exits, heartbeats) have no caller to return a store error to.
inline void log_error(const absl::Status& s) {
    if (!s.ok()) std::fprintf(stderr, "deltatuned: %s\n", std::string(s.message()).c_str());
}

struct JobManager::Impl {
    JobManagerOptions opt;
    // The outputs roots, opened once at start: output folders are checked and claimed beneath
    // them (output_claim.h).
    std::unique_ptr<PathSandbox> outputs;
    std::unique_ptr<JobStore> store;
    std::unique_ptr<RankLauncher> launcher;
    RemoteRanks* remote = nullptr;  // node agents; null: no remote placement
    int lock_fd = -1;

    std::mutex mu;
    std::condition_variable wake_cv;      // the scheduler's
    std::condition_variable attempts_cv;  // signalled when an attempt ends
    bool wake = false;
    bool stopping = false;       // scheduler exits
    bool shutting_down = false;  // no admissions, ranks told to checkpoint and exit
    bool finished = false;       // shut down or abandoned
    std::map<std::string, Record> jobs;
    std::map<int64_t, std::string> by_seq;
    std::map<std::string, std::string> by_request_id;
    int64_t last_create_seq = 0;
    std::thread scheduler;

    std::mutex listeners_mu;  // never taken with mu held
    std::map<int, std::function<void()>> listeners;
    int next_listener = 0;

    ~Impl();

    // job_manager.cc
    absl::StatusOr<Record*> lookup(const std::string& name);
    v1::Job view(const Record& r) const;
    absl::Status commit(Record& r, Change change);
    void reorder_queue();
    void notify();  // call with mu NOT held

    // job_supervisor.cc (report: rank_reports.cc)
    absl::Status recover_orphans();
    void scheduler_loop();
    int active_count() const;
    absl::Status launch(Record& r);
    void on_rank_exit(const RankExit& e);
    void rank_exited(Record& r, const RankExit& e);  // mu held

    // remote_placement.cc
    // The ranks placed on agents (orders sent), or nullopt while too few agents have room (an
    // event says why, once).
    absl::StatusOr<std::optional<std::vector<RankPid>>> place_remote(Record& r,
                                                                     const LaunchSpec& spec);
    // SIGTERM (SIGKILL after grace; at once for 0) to local ranks, the same order to agents.
    void terminate_ranks(Record& r, std::chrono::milliseconds grace);
    // Every rank on an agent that stopped heartbeating has ended: AGENT_LOST.
    void check_agents();
    // "node-0: ranks 0-1; node-1: ranks 2-3" for ranks on agents; "" for local ones.
    std::string describe_placement(const std::vector<RankPid>& ranks) const;
    void fault(Record& r, Change& c, const std::string& kind, int rank, const std::string& why);
    void finish_attempt(Record& r);
    void check_heartbeats();
    void requeue_recovering();
    v1::RankDirective report(const v1::RankReport& report);
    v1::RankDirective::Action action_for(Ending ending) const;  // what a live rank does next
    void shutdown(std::chrono::milliseconds grace);
};

std::string job_dir(const JobManagerOptions& opt, const std::string& id);

}  // namespace deltatune::daemon
