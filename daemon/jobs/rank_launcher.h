// Spawns and supervises rank processes: one posix_spawn per rank, its own process group (so a
// kill reaches anything it forked), stdout/stderr to <attempt_dir>/rank-<r>.log, a monitor thread
// that reaps exactly its own children (waitpid on each pid, never -1, so popen elsewhere in the
// process keeps working) and escalates SIGTERM to SIGKILL after a grace period.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/store/job_store.h"

namespace deltatune::daemon {

struct RankExit {
    std::string job_id;
    int attempt = 0;
    int rank = 0;
    int exit_code = -1;  // -1 when killed by a signal
    int signal = 0;      // the signal that ended it, else 0
};

struct LaunchSpec {
    std::string job_id;  // "{id}"; ranks get "--job jobs/{id}"
    int attempt = 0;
    int world = 1;
    std::string executable;   // run as `<executable> rank ...`
    std::string supervisor;   // "unix:<state_dir>/rank.sock"
    std::string attempt_dir;  // <state_dir>/jobs/<id>/attempt-<n>: logs go here
    std::string spec_path;    // <attempt_dir>/spec.binpb
    // The daemon's path roots: a rank opens every job file beneath them (--read-root, and
    // --write-root for outputs).
    std::vector<std::string> read_roots, write_roots;
    // On a node agent: the global ranks this node runs (empty: 0 .. world-1) and the address its
    // ranks listen on for their peers (empty: loopback).
    std::vector<int> ranks;
    std::string address;
};

// Creates spec.attempt_dir and writes `spec_bytes` (a serialized JobSpec) to spec.spec_path,
// atomically: what the ranks of the attempt read.
absl::Status write_attempt_spec(const LaunchSpec& spec, const std::string& spec_bytes);

// The exact argv of one rank (argv[0] is the executable); `local_rank` is its index on this node.
std::vector<std::string> rank_argv(const LaunchSpec& spec, int rank, int local_rank);

// /proc/<pid>/stat start time in clock ticks; 0 when the process does not exist.
uint64_t process_start_ticks(pid_t pid);
// True when the recorded process still runs (same start time, not a zombie).
bool rank_process_alive(const RankPid& rank);

class RankLauncher {
  public:
    using ExitCallback = std::function<void(const RankExit&)>;
    // `on_exit` runs on the monitor thread with no launcher lock held.
    explicit RankLauncher(ExitCallback on_exit);
    ~RankLauncher();  // stop(); children are left running (a crash leaves them too)
    RankLauncher(const RankLauncher&) = delete;
    RankLauncher& operator=(const RankLauncher&) = delete;

    // Spawns spec.ranks (default all spec.world). On a failure, ranks already spawned are killed.
    absl::StatusOr<std::vector<RankPid>> launch(const LaunchSpec& spec);
    // SIGTERM now, SIGKILL after `grace` if still running. Unknown pids are ignored.
    void terminate(const std::vector<RankPid>& ranks, std::chrono::milliseconds grace);
    void kill_now(const std::vector<RankPid>& ranks) { terminate(ranks, {}); }
    // Stops the monitor thread. Children keep running and are no longer reaped.
    void stop();

  private:
    struct Child {
        std::string job_id;
        int attempt = 0;
        int rank = 0;
        bool kill_pending = false;
        std::chrono::steady_clock::time_point kill_at;
    };
    void monitor();

    ExitCallback on_exit_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<pid_t, Child> children_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace deltatune::daemon
