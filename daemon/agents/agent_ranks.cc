#include "daemon/agents/agent_ranks.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "daemon/random_hex.h"

namespace deltatune::daemon {

AgentRanks::AgentRanks(std::string state_dir, std::string rank_socket, std::string address,
                       std::string executable)
    : state_dir_(std::move(state_dir)),
      rank_socket_(std::move(rank_socket)),
      address_(std::move(address)),
      executable_(std::move(executable)),
      launcher_([this](const RankExit& e) { exited(e); }) {}

void AgentRanks::launch(const v1::LaunchOrder& order) {
    // The job id names a folder here: only what the supervisor's random_hex makes.
    if (!is_random_hex(order.job(), 32) || order.world() < 1 || order.ranks().empty()) {
        refuse(order, "malformed launch order");
        return;
    }
    LaunchSpec ls;
    ls.job_id = order.job();
    ls.attempt = order.attempt();
    ls.world = order.world();
    ls.executable = executable_;
    ls.supervisor = "unix:" + rank_socket_;
    ls.attempt_dir = absl::StrCat(state_dir_, "/jobs/", ls.job_id, "/attempt-", ls.attempt);
    ls.spec_path = ls.attempt_dir + "/spec.binpb";
    ls.read_roots.assign(order.read_roots().begin(), order.read_roots().end());
    ls.write_roots.assign(order.write_roots().begin(), order.write_roots().end());
    ls.ranks.assign(order.ranks().begin(), order.ranks().end());
    ls.address = address_;
    if (absl::Status s = write_attempt_spec(ls, order.spec()); !s.ok()) {
        refuse(order, std::string(s.message()));
        return;
    }
    // Held across the launch so an exit the reaper sees at once finds the ranks recorded.
    std::unique_lock<std::mutex> lock(mu_);
    absl::StatusOr<std::vector<RankPid>> pids = launcher_.launch(ls);
    if (pids.ok()) {
        auto& held = running_[{ls.job_id, ls.attempt}];
        held.insert(held.end(), pids->begin(), pids->end());
    }
    lock.unlock();
    if (!pids.ok()) {
        refuse(order, std::string(pids.status().message()));
        return;
    }
    std::fprintf(stderr, "deltatuned agent: jobs/%s attempt %d: started %d rank(s)\n",
                 ls.job_id.c_str(), ls.attempt, static_cast<int>(pids->size()));
}

void AgentRanks::refuse(const v1::LaunchOrder& order, const std::string& why) {
    std::fprintf(stderr, "deltatuned agent: jobs/%s attempt %d: %s\n", order.job().c_str(),
                 order.attempt(), why.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    for (int rank : order.ranks()) {
        v1::RemoteRankExit& e = exits_.emplace_back();
        e.set_job(order.job());
        e.set_attempt(order.attempt());
        e.set_rank(rank);
        e.set_exit_code(127);
    }
}

void AgentRanks::terminate(const v1::TerminateOrder& order) {
    std::vector<RankPid> pids;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = running_.find({order.job(), order.attempt()});
        if (it == running_.end()) return;
        pids = it->second;
    }
    launcher_.terminate(pids, std::chrono::milliseconds(std::max(0, order.grace_ms())));
}

void AgentRanks::kill_all() {
    std::vector<RankPid> pids;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [key, held] : running_) pids.insert(pids.end(), held.begin(), held.end());
        exits_.clear();  // for attempts the supervisor no longer knows
    }
    launcher_.kill_now(pids);
}

bool AgentRanks::idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return running_.empty();
}

void AgentRanks::exited(const RankExit& e) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = running_.find({e.job_id, e.attempt});
    if (it != running_.end()) {
        std::erase_if(it->second, [&](const RankPid& p) { return p.rank == e.rank; });
        if (it->second.empty()) running_.erase(it);
    }
    v1::RemoteRankExit& x = exits_.emplace_back();
    x.set_job(e.job_id);
    x.set_attempt(e.attempt);
    x.set_rank(e.rank);
    x.set_exit_code(e.exit_code);
    x.set_signal(e.signal);
}

std::vector<v1::RemoteRankExit> AgentRanks::take_exits() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(exits_, {});
}

void AgentRanks::give_back(std::vector<v1::RemoteRankExit> exits) {
    std::lock_guard<std::mutex> lock(mu_);
    exits_.insert(exits_.begin(), exits.begin(), exits.end());
}

}  // namespace deltatune::daemon
