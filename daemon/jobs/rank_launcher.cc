// posix_spawn-based rank supervision. posix_spawn (vfork-like clone in glibc) is safe from a
// multi-threaded daemon, where fork() + arbitrary code before exec is not.
#include "daemon/jobs/rank_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "runtime/base/file_util.h"

extern char** environ;

namespace deltatune::daemon {
namespace {

using Clock = std::chrono::steady_clock;

// Signals the daemon blocks or ignores (it waits for SIGTERM/SIGINT with sigwait and ignores
// SIGPIPE); a rank must start with all of them at their defaults and unblocked.
constexpr int kResetSignals[] = {SIGTERM, SIGINT, SIGPIPE, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

absl::StatusOr<pid_t> spawn_one(const LaunchSpec& spec, int rank, int local_rank) {
    const std::vector<std::string> args = rank_argv(spec, rank, local_rank);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const std::string log = absl::StrCat(spec.attempt_dir, "/rank-", rank, ".log");

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    // The daemon's sockets and the SQLite file must not leak into a rank.
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : kResetSignals) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        return absl::FailedPreconditionError(absl::StrCat("RANK_EXITED: cannot start rank ", rank,
                                                          " (", args[0], "): ", std::strerror(rc)));
    }
    return pid;
}

void signal_group(pid_t pid, int sig) {
    // The rank leads its own process group; signal the group, and the pid in case it moved.
    ::kill(-pid, sig);
    ::kill(pid, sig);
}

}  // namespace

absl::Status write_attempt_spec(const LaunchSpec& spec, const std::string& spec_bytes) {
    std::error_code ec;
    std::filesystem::create_directories(spec.attempt_dir, ec);
    if (ec) return absl::InternalError(absl::StrCat(spec.attempt_dir, ": ", ec.message()));
    return write_file_atomic(spec.spec_path, spec_bytes);
}

std::vector<std::string> rank_argv(const LaunchSpec& spec, int rank, int local_rank) {
    std::vector<std::string> argv{spec.executable, "rank",
                                  "--supervisor",  spec.supervisor,
                                  "--job",         "jobs/" + spec.job_id,
                                  "--attempt",     std::to_string(spec.attempt),
                                  "--rank",        std::to_string(rank),
                                  "--world",       std::to_string(spec.world),
                                  "--spec",        spec.spec_path};
    for (const std::string& r : spec.read_roots) argv.insert(argv.end(), {"--read-root", r});
    for (const std::string& r : spec.write_roots) argv.insert(argv.end(), {"--write-root", r});
    if (!spec.address.empty()) argv.insert(argv.end(), {"--address", spec.address});
    if (local_rank != rank) argv.insert(argv.end(), {"--local-rank", std::to_string(local_rank)});
    return argv;
}

namespace {

// Fields 3 (state) and 22 (starttime) of /proc/<pid>/stat; {'\0', 0} when there is no process.
std::pair<char, uint64_t> proc_stat(pid_t pid) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');  // comm may contain spaces and parentheses
    if (paren == std::string::npos) return {'\0', 0};
    std::istringstream rest(stat.substr(paren + 1));
    std::string field;
    char state = '\0';
    for (int i = 3; i <= 22 && rest >> field; ++i) {
        if (i == 3) state = field[0];
        if (i == 22) return {state, std::strtoull(field.c_str(), nullptr, 10)};
    }
    return {'\0', 0};
}

}  // namespace

uint64_t process_start_ticks(pid_t pid) {
    return proc_stat(pid).second;
}

bool rank_process_alive(const RankPid& rank) {
    const auto [state, ticks] = proc_stat(rank.pid);
    return ticks != 0 && ticks == rank.start_ticks && state != 'Z' && state != 'X';
}

RankLauncher::RankLauncher(ExitCallback on_exit)
    : on_exit_(std::move(on_exit)), thread_([this] { monitor(); }) {}

RankLauncher::~RankLauncher() {
    stop();
}

void RankLauncher::stop() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

absl::StatusOr<std::vector<RankPid>> RankLauncher::launch(const LaunchSpec& spec) {
    if (::access(spec.executable.c_str(), X_OK) != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "RANK_EXITED: rank executable ", spec.executable, ": ", std::strerror(errno)));
    }
    std::vector<int> ranks = spec.ranks;
    if (ranks.empty()) {
        for (int r = 0; r < spec.world; ++r) ranks.push_back(r);
    }
    std::vector<RankPid> started;
    for (size_t local = 0; local < ranks.size(); ++local) {
        const int r = ranks[local];
        absl::StatusOr<pid_t> pid = spawn_one(spec, r, static_cast<int>(local));
        if (!pid.ok()) {
            kill_now(started);
            return pid.status();
        }
        started.push_back({r, *pid, process_start_ticks(*pid), {}});
        std::lock_guard<std::mutex> lock(mu_);
        Child& child = children_[*pid];
        child.job_id = spec.job_id;
        child.attempt = spec.attempt;
        child.rank = r;
    }
    cv_.notify_all();
    return started;
}

void RankLauncher::terminate(const std::vector<RankPid>& ranks, std::chrono::milliseconds grace) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const RankPid& r : ranks) {
        auto it = children_.find(r.pid);
        if (it == children_.end()) continue;  // already reaped: the pid may belong to another
        signal_group(r.pid, grace.count() > 0 ? SIGTERM : SIGKILL);
        if (grace.count() > 0 && !it->second.kill_pending) {
            it->second.kill_pending = true;
            it->second.kill_at = Clock::now() + grace;
        }
    }
    cv_.notify_all();
}

void RankLauncher::monitor() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
        if (children_.empty()) {
            cv_.wait(lock, [&] { return stopping_ || !children_.empty(); });
            continue;
        }
        // Polling every pid keeps reaping scoped to our own children (see the header).
        cv_.wait_for(lock, std::chrono::milliseconds(20));
        std::vector<RankExit> exits;
        const auto now = Clock::now();
        for (auto it = children_.begin(); it != children_.end();) {
            // WNOWAIT leaves the zombie in place, so its pid (and group id) cannot be reused
            // while we kill whatever the rank left in its group.
            siginfo_t info{};
            const int rc = ::waitid(P_PID, it->first, &info, WEXITED | WNOHANG | WNOWAIT);
            if ((rc == 0 && info.si_pid == it->first) || (rc < 0 && errno == ECHILD)) {
                ::kill(-it->first, SIGKILL);
                int status = 0;
                const pid_t done = ::waitpid(it->first, &status, 0);
                RankExit e{it->second.job_id, it->second.attempt, it->second.rank};
                if (done > 0 && WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
                if (done > 0 && WIFSIGNALED(status)) e.signal = WTERMSIG(status);
                exits.push_back(std::move(e));
                it = children_.erase(it);
                continue;
            }
            if (it->second.kill_pending && now >= it->second.kill_at) {
                signal_group(it->first, SIGKILL);
                it->second.kill_pending = false;
            }
            ++it;
        }
        if (exits.empty()) continue;
        lock.unlock();
        for (const RankExit& e : exits) on_exit_(e);
        lock.lock();
    }
}

}  // namespace deltatune::daemon
