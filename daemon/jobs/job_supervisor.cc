// JobManager's supervision half: start-up recovery of orphaned jobs, the scheduler thread, rank
// launches, rank reports and exits (the exit-code contract below), heartbeats, and shutdown.
//
// Rank exit contract: 0 after a report with EXPORT_COMPLETED (details "path") -> SUCCEEDED;
// 0 after CHECKPOINT_AND_EXIT -> PAUSED (QUEUED on daemon shutdown); 2 -> FAILED with the last
// ERROR event's details["reason"] (no retry); anything else, a signal, or silence for
// heartbeat_timeout -> FAULT_DETECTED, RECOVERING, attempt+1 and relaunch, until max_restarts.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/config/job_yaml.h"
#include "daemon/jobs/job_manager_impl.h"
#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/device_context.h"

namespace deltatune::daemon {
namespace {

namespace fs = std::filesystem;
using v1::Job;
using v1::JobEvent;
using Action = v1::RankDirective::Action;

bool holds_slot(const Record& r) {
    return r.attempt.has_value() || holds_resources(r.stored.job.state());
}

std::string describe_exit(const RankExit& e) {
    if (e.signal != 0) return absl::StrCat("rank ", e.rank, " was killed by signal ", e.signal);
    if (e.exit_code == 0) return absl::StrCat("rank ", e.rank, " exited 0 before finishing");
    return absl::StrCat("rank ", e.rank, " exited with code ", e.exit_code);
}

// SIGKILLs ranks recorded by a previous daemon and waits (bounded) until they are gone, so a
// relaunch does not race them for GPU memory.
void kill_orphans(const std::vector<RankPid>& ranks) {
    for (const RankPid& r : ranks) {
        if (!r.agent_id.empty() || !rank_process_alive(r)) continue;  // agents stop their own
        ::kill(-r.pid, SIGKILL);
        ::kill(r.pid, SIGKILL);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (const RankPid& r : ranks) {
        while (r.agent_id.empty() && rank_process_alive(r) && Clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
}

}  // namespace

JobManagerOptions job_manager_options(const DaemonConfig& c) {
    JobManagerOptions o;
    o.state_dir = c.state_dir;
    o.roots = c.roots;
    o.limits = c.limits;
    o.max_concurrent_jobs = c.max_concurrent_jobs;
    o.heartbeat_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(c.heartbeat_timeout_seconds * 1000));
    o.rank_term_grace =
        std::chrono::milliseconds(static_cast<int64_t>(c.rank_term_grace_seconds * 1000));
    std::error_code ec;
    o.rank_executable = c.rank_executable.empty() ? fs::read_symlink("/proc/self/exe", ec).string()
                                                  : c.rank_executable;
    o.rank_supervisor = "unix:" + c.state_dir + "/rank.sock";
    o.gpu_memory_bytes = static_cast<int64_t>(c.gpu_memory_gib * double(int64_t{1} << 30));
    o.gpus = c.gpus >= 0 ? c.gpus : cuda_device_count();
    o.cpu = cpu_budget(c.cpu_cores, c.cpu_memory_gib, c.cpu_rank_memory_gib);
    return o;
}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::open(JobManagerOptions opt) {
    auto impl = std::make_unique<Impl>();
    impl->opt = std::move(opt);
    std::error_code ec;
    fs::create_directories(impl->opt.state_dir + "/jobs", ec);
    if (ec) {
        return absl::FailedPreconditionError(
            absl::StrCat("state_dir ", impl->opt.state_dir, ": ", ec.message()));
    }
    fs::permissions(impl->opt.state_dir + "/jobs", fs::perms::owner_all, ec);
    // Output folders are created beneath the outputs roots through the roots' descriptors
    // (output_claim.cc, the ranks' sandbox): a root must exist, so a missing one is made now.
    for (const std::string& root : impl->opt.roots.outputs) {
        fs::create_directories(root, ec);
        if (ec) {
            return absl::FailedPreconditionError(
                absl::StrCat("roots.outputs '", root, "': cannot create: ", ec.message()));
        }
    }
    DT_ASSIGN_OR_RETURN(
        PathSandbox outputs,
        PathSandbox::confined({{}, existing_resolved_roots(impl->opt.roots.outputs)}));
    impl->outputs = std::make_unique<PathSandbox>(std::move(outputs));
    // Two daemons on one state_dir would both launch the same jobs.
    const std::string lock = impl->opt.state_dir + "/deltatuned.lock";
    impl->lock_fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (impl->lock_fd < 0 || ::flock(impl->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("another deltatuned holds ", lock, " (or it cannot be opened)"));
    }
    DT_ASSIGN_OR_RETURN(impl->store, JobStore::open(impl->opt.state_dir + "/jobs.db"));
    DT_RETURN_IF_ERROR(impl->recover_orphans());
    Impl* raw = impl.get();
    impl->launcher = std::make_unique<RankLauncher>([raw](const RankExit& e) {
        raw->on_rank_exit(e);
        raw->notify();
    });
    return std::unique_ptr<JobManager>(new JobManager(std::move(impl)));
}

void JobManager::start() {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->scheduler.joinable() && !impl_->finished) {
        impl_->scheduler = std::thread([impl = impl_.get()] { impl->scheduler_loop(); });
    }
}

void JobManager::abandon_for_test() {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->stopping = impl_->finished = true;
    }
    impl_->wake_cv.notify_all();
    if (impl_->scheduler.joinable()) impl_->scheduler.join();
    impl_->launcher->stop();
    ::close(impl_->lock_fd);
    impl_->lock_fd = -1;
}

JobManager::Impl::~Impl() {
    {
        std::lock_guard<std::mutex> lock(mu);
        stopping = true;
    }
    wake_cv.notify_all();
    if (scheduler.joinable()) scheduler.join();
    launcher.reset();
    if (lock_fd >= 0) ::close(lock_fd);
}

absl::Status JobManager::Impl::recover_orphans() {
    DT_ASSIGN_OR_RETURN(std::vector<StoredJob> all, store->load_all());
    for (StoredJob& s : all) {
        Record& r = jobs[s.id];
        r.stored = std::move(s);
        last_create_seq = std::max(last_create_seq, r.stored.create_seq);
        by_seq[r.stored.create_seq] = r.stored.id;
        if (!r.stored.job.request_id().empty())
            by_request_id[r.stored.job.request_id()] = r.stored.id;
        // The previous daemon died (or shut down around stuck ranks): its ranks are orphans.
        kill_orphans(r.stored.rank_pids);
        if (!holds_slot(r)) {
            if (!r.stored.rank_pids.empty()) {
                r.stored.rank_pids.clear();
                DT_RETURN_IF_ERROR(store->save(r.stored));
            }
            continue;
        }
        Change c(r.stored);
        if (!c.next.rank_pids.empty()) c.next.job.set_attempt(c.next.job.attempt() + 1);
        c.next.rank_pids.clear();
        const std::map<std::string, std::string> why{{"reason", "DAEMON_RESTART"}};
        if (r.stored.job.state() == Job::CANCELLING) {
            c.set_state(Job::CANCELLED, "CANCELLED_BY_USER", "cancelled by the user");
            c.add("CANCELLED", JobEvent::INFO, "cancelled (completed after a daemon restart)", why);
        } else if (r.stored.job.state() == Job::PAUSING) {
            c.set_state(Job::PAUSED);
            c.add("PAUSED", JobEvent::WARNING, "daemon restarted while pausing", why);
        } else {
            c.set_state(Job::QUEUED);
            c.add("QUEUED", JobEvent::WARNING,
                  "daemon restarted; re-queued to resume from the last checkpoint", why);
        }
        DT_RETURN_IF_ERROR(commit(r, std::move(c)));
    }
    reorder_queue();
    return absl::OkStatus();
}

int JobManager::Impl::active_count() const {
    int n = 0;
    for (const auto& [id, r] : jobs) n += holds_slot(r) ? 1 : 0;
    return n;
}

void JobManager::Impl::scheduler_loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
        wake_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return wake || stopping; });
        wake = false;
        if (stopping) break;
        const uint64_t before = [&] {
            uint64_t v = 0;
            for (const auto& [id, r] : jobs) v += r.version;
            return v;
        }();
        check_heartbeats();
        check_agents();
        // A recovering job keeps its slot and is relaunched before the queue is considered.
        for (auto& [id, r] : jobs) {
            if (!shutting_down && r.stored.job.state() == Job::RECOVERING && !r.attempt) {
                log_error(launch(r));
            }
        }
        while (!shutting_down && active_count() < opt.max_concurrent_jobs) {
            Record* next = nullptr;
            for (auto& [id, r] : jobs) {
                if (r.stored.job.state() == Job::QUEUED && r.queue_position == 1) next = &r;
            }
            if (next == nullptr) break;
            log_error(launch(*next));
            reorder_queue();
            if (!next->attempt && next->stored.job.state() == Job::QUEUED) break;  // no room yet
        }
        uint64_t after = 0;
        for (const auto& [id, r] : jobs) after += r.version;
        if (after != before) {
            lock.unlock();
            notify();
            lock.lock();
        }
    }
}

absl::Status JobManager::Impl::launch(Record& r) {
    const v1::JobSpec& spec = r.stored.job.spec();
    LaunchSpec ls;
    ls.job_id = r.stored.id;
    ls.attempt = r.stored.job.attempt();
    ls.world = spec.resources().gpus() > 0 ? spec.resources().gpus() : spec.resources().cpu_ranks();
    ls.executable = opt.rank_executable;
    ls.supervisor = opt.rank_supervisor;
    ls.attempt_dir = absl::StrCat(job_dir(opt, ls.job_id), "/attempt-", ls.attempt);
    ls.spec_path = ls.attempt_dir + "/spec.binpb";
    ls.read_roots = existing_resolved_roots(opt.roots.models);
    for (const std::string& r : existing_resolved_roots(opt.roots.data)) ls.read_roots.push_back(r);
    ls.write_roots = existing_resolved_roots(opt.roots.outputs);
    Change c(r.stored);
    const absl::Status s = write_attempt_spec(ls, spec.SerializeAsString());
    absl::StatusOr<std::vector<RankPid>> ranks = std::vector<RankPid>{};
    if (!s.ok()) {
        ranks = s;
    } else if (spec.resources().nodes() > 0) {
        absl::StatusOr<std::optional<std::vector<RankPid>>> placed = place_remote(r, ls);
        if (placed.ok() && !placed->has_value()) return absl::OkStatus();  // waits for agents
        if (placed.ok()) {
            ranks = std::move(**placed);
        } else {
            ranks = placed.status();
        }
    } else {
        ranks = launcher->launch(ls);
    }
    if (!ranks.ok()) {
        const std::string msg(ranks.status().message());
        c.set_state(Job::FAILED, "RANK_EXITED", msg);
        c.add("FAILED", JobEvent::ERROR, msg, {{"reason", "RANK_EXITED"}});
        DT_RETURN_IF_ERROR(commit(r, std::move(c)));
        return ranks.status();
    }
    c.next.rank_pids = *ranks;
    if (!c.next.job.has_start_time()) *c.next.job.mutable_start_time() = now_timestamp();
    std::map<std::string, std::string> details{{"world_size", std::to_string(ls.world)},
                                               {"attempt", std::to_string(ls.attempt)}};
    const std::string where = describe_placement(*ranks);
    if (!where.empty()) details["placement"] = where;
    const std::string on = where.empty() ? "" : " (" + where + ")";
    if (r.stored.job.state() == Job::QUEUED) {
        c.set_state(Job::PENDING);
        c.add("ADMITTED", JobEvent::INFO, absl::StrCat(ls.world, " rank(s) started", on), details);
    } else {
        c.add("RECOVERY_STARTED", JobEvent::INFO,
              absl::StrCat("attempt ", ls.attempt, ": ", ls.world, " rank(s) restarted", on),
              details);
    }
    r.last_error_reason.clear();  // errors are per attempt
    r.last_error_message.clear();
    Attempt a;
    a.number = ls.attempt;
    a.ranks = *ranks;
    a.exited.assign(ls.world, false);
    a.last_report.assign(ls.world, Clock::now());
    a.alive = ls.world;
    for (const RankPid& p : a.ranks) {
        if (!p.agent_id.empty()) a.agent_hosts[p.agent_id] = remote->hostname(p.agent_id);
    }
    r.waiting_for.clear();
    r.attempt = std::move(a);
    return commit(r, std::move(c));
}

void JobManager::Impl::fault(Record& r, Change& c, const std::string& kind, int rank,
                             const std::string& why) {
    Attempt& a = *r.attempt;
    a.ending = Ending::kFault;
    c.set_state(Job::RECOVERING, kind, why);
    c.add("FAULT_DETECTED", JobEvent::ERROR, why, {{"kind", kind}, {"rank", std::to_string(rank)}});
    // A silent rank may be hung, and a lost agent's peers wait on it: no grace.
    const bool now = kind == "HEARTBEAT_LOST" || kind == "AGENT_LOST";
    terminate_ranks(r, now ? std::chrono::milliseconds(0) : opt.rank_term_grace);
}

void JobManager::Impl::on_rank_exit(const RankExit& e) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = jobs.find(e.job_id);
    if (it == jobs.end() || !it->second.attempt || it->second.attempt->number != e.attempt) return;
    rank_exited(it->second, e);
}

void JobManager::Impl::rank_exited(Record& r, const RankExit& e) {
    Attempt& a = *r.attempt;
    if (e.rank < 0 || e.rank >= static_cast<int>(a.exited.size()) || a.exited[e.rank]) return;
    a.exited[e.rank] = true;
    --a.alive;
    const bool clean = e.exit_code == 0;
    a.all_zero = a.all_zero && clean;
    if (a.ending == Ending::kNone) {
        if (clean && !a.export_path.empty()) {
            a.ending = Ending::kSucceeded;  // the other ranks finish by themselves
        } else if (e.exit_code == 2) {
            a.ending = Ending::kInvalid;
            terminate_ranks(r, opt.rank_term_grace);
        } else {
            Change c(r.stored);
            // A rank that said why it failed: its reason and words are the job's error.
            const bool said = !r.last_error_reason.empty();
            fault(r, c, said ? r.last_error_reason : "RANK_EXITED", e.rank,
                  said ? absl::StrCat(describe_exit(e), ": ", r.last_error_message)
                       : describe_exit(e));
            log_error(commit(r, std::move(c)));
        }
    }
    if (a.alive == 0) finish_attempt(r);
}

void JobManager::Impl::finish_attempt(Record& r) {
    const Attempt a = std::move(*r.attempt);
    r.attempt.reset();
    r.last_agents.clear();  // a relaunch prefers the same nodes (remote_placement.cc)
    for (const RankPid& p : a.ranks) {
        if (!p.agent_id.empty() && (r.last_agents.empty() || r.last_agents.back() != p.agent_id))
            r.last_agents.push_back(p.agent_id);
    }
    Change c(r.stored);
    c.next.rank_pids.clear();
    const bool wound_down = a.ending == Ending::kCancel || a.ending == Ending::kPause ||
                            a.ending == Ending::kShutdown || a.ending == Ending::kDrain;
    Job& j = c.next.job;
    if (!a.export_path.empty() && (a.ending == Ending::kSucceeded || (wound_down && a.all_zero))) {
        j.set_result_model(a.export_path);
        c.set_state(Job::SUCCEEDED);
        c.add("SUCCEEDED", JobEvent::INFO, "exported " + a.export_path, {{"path", a.export_path}});
    } else if (a.ending == Ending::kCancel) {
        c.set_state(Job::CANCELLED, "CANCELLED_BY_USER", "cancelled by the user");
        c.add("CANCELLED", JobEvent::INFO, "cancelled; every rank has exited");
    } else if (a.ending == Ending::kPause) {
        c.set_state(Job::PAUSED);
        c.add("PAUSED", JobEvent::INFO, "paused; resumes from " + j.latest_checkpoint());
    } else if (a.ending == Ending::kShutdown) {
        j.set_attempt(j.attempt() + 1);
        c.set_state(Job::QUEUED);
        c.add("QUEUED", JobEvent::WARNING, "daemon shutting down; resumes after restart",
              {{"reason", "DAEMON_SHUTDOWN"}});
    } else if (a.ending == Ending::kDrain) {
        // Not a fault: the job moves off a machine that is being taken away.
        j.set_attempt(j.attempt() + 1);
        const std::string from =
            a.all_zero ? "its checkpoint " + j.latest_checkpoint()
                       : "its last checkpoint (a rank failed while its agent drained)";
        c.set_state(Job::RECOVERING, "AGENT_DRAINING", "moving off a draining node agent");
        c.add("RELOCATING", JobEvent::INFO, "moving to other node agents; resumes from " + from,
              {{"reason", "AGENT_DRAINING"}});
    } else if (a.ending == Ending::kInvalid) {
        const std::string reason =
            r.last_error_reason.empty() ? "INVALID_CONFIG" : r.last_error_reason;
        c.set_state(Job::FAILED, reason, r.last_error_message);
        c.add("FAILED", JobEvent::ERROR, r.last_error_message, {{"reason", reason}});
    } else if (++c.next.fault_count > j.spec().max_restarts()) {
        const std::string msg = absl::StrCat("gave up after ", j.spec().max_restarts(),
                                             " restarts; last fault: ", j.error_message());
        c.set_state(Job::FAILED, "MAX_RESTARTS_EXCEEDED", msg);
        c.add("FAILED", JobEvent::ERROR, msg, {{"reason", "MAX_RESTARTS_EXCEEDED"}});
    } else {
        j.set_attempt(j.attempt() + 1);  // stays RECOVERING; the scheduler relaunches it
    }
    log_error(commit(r, std::move(c)));
    reorder_queue();
    wake = true;
    wake_cv.notify_all();
    attempts_cv.notify_all();
}

void JobManager::Impl::check_heartbeats() {
    const auto now = Clock::now();
    for (auto& [id, r] : jobs) {
        if (!r.attempt) continue;
        Attempt& a = *r.attempt;
        if (a.ending != Ending::kNone && a.ending != Ending::kPause &&
            a.ending != Ending::kShutdown && a.ending != Ending::kDrain) {
            continue;  // already being killed with escalation
        }
        for (size_t i = 0; i < a.exited.size(); ++i) {
            // A rank on a node agent gets a second more, so that a lost agent (whose ranks all
            // fall silent with it) is found by check_agents and said as such.
            const auto timeout = opt.heartbeat_timeout + (a.ranks[i].agent_id.empty()
                                                              ? std::chrono::milliseconds(0)
                                                              : std::chrono::milliseconds(1000));
            if (a.exited[i] || now - a.last_report[i] <= timeout) continue;
            if (a.ending != Ending::kNone) {
                terminate_ranks(r, {});  // ends as PAUSED/QUEUED from the last checkpoint
                break;
            }
            const auto secs = std::chrono::duration<double>(now - a.last_report[i]).count();
            Change c(r.stored);
            fault(r, c, "HEARTBEAT_LOST", static_cast<int>(i),
                  absl::StrCat("rank ", i, " sent no report for ", static_cast<int>(secs), " s"));
            log_error(commit(r, std::move(c)));
            break;
        }
    }
}

void JobManager::Impl::requeue_recovering() {
    for (auto& [id, r] : jobs) {
        if (r.attempt || r.stored.job.state() != Job::RECOVERING) continue;
        Change c(r.stored);
        c.set_state(Job::QUEUED);
        c.add("QUEUED", JobEvent::WARNING, "daemon shutting down; resumes after restart",
              {{"reason", "DAEMON_SHUTDOWN"}});
        log_error(commit(r, std::move(c)));
    }
    reorder_queue();
}

void JobManager::Impl::shutdown(std::chrono::milliseconds grace) {
    {
        std::unique_lock<std::mutex> lock(mu);
        if (finished) return;
        shutting_down = true;
        for (auto& [id, r] : jobs) {
            if (r.attempt && r.attempt->ending == Ending::kNone)
                r.attempt->ending = Ending::kShutdown;
        }
        requeue_recovering();
        auto none_left = [&] {
            for (const auto& [id, r] : jobs) {
                if (r.attempt) return false;
            }
            return true;
        };
        attempts_cv.wait_for(lock, grace, none_left);
        if (!none_left()) {
            for (auto& [id, r] : jobs) {
                if (r.attempt) terminate_ranks(r, {});
            }
            attempts_cv.wait_for(lock, std::chrono::seconds(5), none_left);
        }
        // Ranks that survive SIGKILL (uninterruptible sleep) are recorded nowhere else: keep
        // their pids in the store so the next start kills them.
        for (auto& [id, r] : jobs) {
            if (!r.attempt) continue;
            const std::vector<RankPid> stuck = r.attempt->ranks;
            r.attempt->alive = 0;
            finish_attempt(r);
            r.stored.rank_pids = stuck;
            log_error(store->save(r.stored));
        }
        requeue_recovering();
        stopping = finished = true;
    }
    wake_cv.notify_all();
    if (scheduler.joinable()) scheduler.join();
    launcher->stop();
    notify();
}

}  // namespace deltatune::daemon
