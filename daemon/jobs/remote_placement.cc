// Jobs with resources.nodes: their ranks placed on node agents (node-major, the same count on
// each, a relaunch on the previous attempt's nodes where they have room), stopped through them,
// their exits taken from them, and an agent that stops heartbeating turned into a fault of every
// job it ran ranks for (AGENT_LOST), which recovers as any other.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "daemon/jobs/job_manager_impl.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

using v1::Job;
using v1::JobEvent;

bool uses_gpus(const Record& r) {
    return r.stored.job.spec().resources().gpus() > 0;
}

// A running attempt with ranks on a draining agent checkpoints (its ranks are told
// CHECKPOINT_AND_EXIT) and is then placed again elsewhere (finish_attempt, kDrain).
void drain_if_agent_leaves(JobManager::Impl& m, Record& r) {
    Attempt& a = *r.attempt;
    if (a.ending != Ending::kNone) return;
    for (size_t i = 0; i < a.ranks.size(); ++i) {
        const std::string& agent = a.ranks[i].agent_id;
        if (a.exited[i] || agent.empty() || !m.remote->is_draining(agent)) continue;
        a.ending = Ending::kDrain;
        Change c(r.stored);
        c.add("AGENT_DRAINING", JobEvent::WARNING,
              absl::StrCat("node agent ", a.agent_hosts[agent],
                           " is shutting down: checkpointing to move to other agents"),
              {{"agent", agent}});
        log_error(m.commit(r, std::move(c)));
        return;
    }
}

// The agents of the previous attempt first, in their node order (a relaunch keeps each rank on
// its node: warm caches, the same GPUs), then the others by hostname.
void prefer_previous(const std::vector<std::string>& previous, std::vector<AgentOffer>& fit) {
    std::vector<AgentOffer> ordered;
    for (const std::string& id : previous) {
        auto it = std::find_if(fit.begin(), fit.end(),
                               [&](const AgentOffer& a) { return a.agent_id == id; });
        if (it == fit.end()) continue;
        ordered.push_back(*it);
        fit.erase(it);
    }
    ordered.insert(ordered.end(), fit.begin(), fit.end());
    fit = std::move(ordered);
}

}  // namespace

absl::StatusOr<std::optional<std::vector<RankPid>>> JobManager::Impl::place_remote(
    Record& r, const LaunchSpec& ls) {
    const int nodes = r.stored.job.spec().resources().nodes();
    if (remote == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("AGENTS_UNAVAILABLE: resources.nodes (",
                                                          nodes,
                                                          ") needs node agents; this daemon "
                                                          "takes none"));
    }
    const bool gpu = uses_gpus(r);
    const int per_node = ls.world / nodes;
    std::map<std::string, int> used;  // ranks other jobs' attempts hold on each agent
    for (const auto& [id, other] : jobs) {
        if (!other.attempt || uses_gpus(other) != gpu) continue;
        for (size_t i = 0; i < other.attempt->ranks.size(); ++i) {
            const RankPid& p = other.attempt->ranks[i];
            if (!p.agent_id.empty() && !other.attempt->exited[i]) ++used[p.agent_id];
        }
    }
    std::vector<AgentOffer> fit;
    const std::vector<AgentOffer> alive = remote->alive_agents();
    for (const AgentOffer& a : alive) {
        if ((gpu ? a.gpus : a.cpu_ranks) - used[a.agent_id] >= per_node) fit.push_back(a);
    }
    prefer_previous(r.last_agents, fit);
    if (static_cast<int>(fit.size()) < nodes) {
        const std::string why =
            absl::StrCat("waiting for ", nodes, " node agents with ", per_node,
                         gpu ? " free GPU(s)" : " free CPU rank(s)", " each; ", fit.size(),
                         " of the ", alive.size(), " alive have room");
        if (why != r.waiting_for) {
            r.waiting_for = why;
            Change c(r.stored);
            c.add("WAITING_FOR_AGENTS", JobEvent::WARNING, why, {{"reason", "AGENTS_UNAVAILABLE"}});
            DT_RETURN_IF_ERROR(commit(r, std::move(c)));
        }
        return std::nullopt;
    }
    const v1::JobSpec& spec = r.stored.job.spec();
    std::vector<RankPid> ranks;
    for (int n = 0; n < nodes; ++n) {
        v1::LaunchOrder order;
        order.set_job(ls.job_id);
        order.set_attempt(ls.attempt);
        order.set_world(ls.world);
        order.set_spec(spec.SerializeAsString());
        for (const std::string& root : ls.read_roots) order.add_read_roots(root);
        for (const std::string& root : ls.write_roots) order.add_write_roots(root);
        for (int k = 0; k < per_node; ++k) {
            const int rank = n * per_node + k;
            order.add_ranks(rank);
            RankPid p;
            p.rank = rank;
            p.agent_id = fit[static_cast<size_t>(n)].agent_id;
            ranks.push_back(p);
        }
        remote->order_launch(fit[static_cast<size_t>(n)].agent_id, std::move(order));
    }
    return std::optional<std::vector<RankPid>>(std::move(ranks));
}

std::string JobManager::Impl::describe_placement(const std::vector<RankPid>& ranks) const {
    std::string out;
    for (size_t i = 0; i < ranks.size(); ++i) {
        const std::string& agent = ranks[i].agent_id;
        if (agent.empty() || (i > 0 && ranks[i - 1].agent_id == agent)) continue;
        size_t last = i;
        while (last + 1 < ranks.size() && ranks[last + 1].agent_id == agent) ++last;
        const std::string host = remote != nullptr ? remote->hostname(agent) : "";
        absl::StrAppend(&out, out.empty() ? "" : "; ", host.empty() ? agent : host,
                        last == i ? ": rank " : ": ranks ", ranks[i].rank,
                        last == i ? "" : absl::StrCat("-", ranks[last].rank));
    }
    return out;
}

void JobManager::Impl::terminate_ranks(Record& r, std::chrono::milliseconds grace) {
    Attempt& a = *r.attempt;
    std::vector<RankPid> local;
    std::set<std::string> agents;
    for (const RankPid& p : a.ranks) {
        if (p.agent_id.empty()) {
            local.push_back(p);
        } else {
            agents.insert(p.agent_id);
        }
    }
    if (!local.empty()) launcher->terminate(local, grace);
    for (const std::string& agent : agents) {
        v1::TerminateOrder order;
        order.set_job(r.stored.id);
        order.set_attempt(a.number);
        order.set_grace_ms(static_cast<int32_t>(grace.count()));
        if (remote != nullptr) remote->order_terminate(agent, std::move(order));
    }
}

void JobManager::Impl::check_agents() {
    if (remote == nullptr) return;
    for (auto& [id, r] : jobs) {
        if (!r.attempt) continue;
        drain_if_agent_leaves(*this, r);
        Attempt& a = *r.attempt;
        std::set<std::string> lost;
        for (size_t i = 0; i < a.ranks.size(); ++i) {
            const std::string& agent = a.ranks[i].agent_id;
            if (!a.exited[i] && !agent.empty() && !remote->is_alive(agent)) lost.insert(agent);
        }
        if (lost.empty()) continue;
        const std::string& agent = *lost.begin();
        int first = -1;
        for (size_t i = 0; i < a.ranks.size(); ++i) {  // their ranks are gone with them
            if (a.exited[i] || lost.count(a.ranks[i].agent_id) == 0) continue;
            if (first < 0) first = static_cast<int>(i);
            a.exited[i] = true;
            --a.alive;
            a.all_zero = false;
        }
        if (a.ending == Ending::kNone) {
            Change c(r.stored);
            fault(r, c, "AGENT_LOST", first,
                  absl::StrCat("node agent ", a.agent_hosts[agent], " (", agent,
                               ") sent no heartbeat within the timeout; its rank(s) are lost"));
            log_error(commit(r, std::move(c)));
        } else {
            terminate_ranks(r, {});
        }
        if (a.alive == 0) finish_attempt(r);
    }
}

void JobManager::set_remote_ranks(RemoteRanks* remote) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->remote = remote;
}

void JobManager::on_remote_rank_exit(const std::string& agent_id, const v1::RemoteRankExit& exit) {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        auto it = impl_->jobs.find(exit.job());
        if (it == impl_->jobs.end() || !it->second.attempt) return;
        Record& r = it->second;
        const Attempt& a = *r.attempt;
        if (a.number != exit.attempt() || exit.rank() < 0 ||
            exit.rank() >= static_cast<int>(a.ranks.size()) ||
            a.ranks[static_cast<size_t>(exit.rank())].agent_id != agent_id) {
            return;
        }
        RankExit e;
        e.job_id = exit.job();
        e.attempt = exit.attempt();
        e.rank = exit.rank();
        e.exit_code = exit.exit_code();
        e.signal = exit.signal();
        impl_->rank_exited(r, e);
    }
    impl_->notify();
}

bool JobManager::placed_on(const std::string& agent_id, const std::string& job, int attempt,
                           int rank) const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->jobs.find(job.rfind("jobs/", 0) == 0 ? job.substr(5) : job);
    if (agent_id.empty() || it == impl_->jobs.end() || !it->second.attempt) return false;
    const Attempt& a = *it->second.attempt;
    if (a.number != attempt) return false;
    for (const RankPid& p : a.ranks) {
        if (p.agent_id == agent_id && (rank < 0 || p.rank == rank)) return true;
    }
    return false;
}

}  // namespace deltatune::daemon
