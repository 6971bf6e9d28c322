#include "daemon/agents/agent_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/random_hex.h"

namespace deltatune::daemon {
absl::StatusOr<v1::RegisterAgentResponse> AgentRegistry::register_agent(const v1::AgentInfo& info) {
    if (info.hostname().empty()) {
        return absl::InvalidArgumentError("agent info: hostname is required");
    }
    if (info.cpu_ranks() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("agent info: cpu_ranks (", info.cpu_ranks(), ") must be >= 0"));
    }
    v1::RegisterAgentResponse out;
    out.set_agent_id("agent-" + random_hex(16));
    out.set_heartbeat_seconds(static_cast<int32_t>(
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(interval_).count())));
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = agents_.begin(); it != agents_.end();) {  // one entry per host
        it = it->second.info.hostname() == info.hostname() ? agents_.erase(it) : std::next(it);
    }
    agents_[out.agent_id()] = Entry{info, Clock::now(), {}, false};
    return out;
}

bool AgentRegistry::heartbeat(const std::string& agent_id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it == agents_.end()) return false;
    it->second.last_beat = Clock::now();
    return true;
}

std::vector<v1::Agent> AgentRegistry::list() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<v1::Agent> out;
    const auto now = Clock::now();
    for (const auto& [id, e] : agents_) {
        v1::Agent& a = out.emplace_back();
        a.set_agent_id(id);
        *a.mutable_info() = e.info;
        const auto silent = now - e.last_beat;
        a.set_seconds_since_heartbeat(std::chrono::duration<double>(silent).count());
        a.set_state(silent > timeout_ ? v1::Agent::LOST : v1::Agent::ALIVE);
        a.set_draining(e.draining);
    }
    std::sort(out.begin(), out.end(), [](const v1::Agent& a, const v1::Agent& b) {
        return a.info().hostname() < b.info().hostname();
    });
    return out;
}

std::optional<v1::AgentPollResponse> AgentRegistry::poll(const std::string& agent_id,
                                                         bool draining) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it == agents_.end()) return std::nullopt;
    it->second.last_beat = Clock::now();
    it->second.draining = it->second.draining || draining;
    v1::AgentPollResponse out;
    out.Swap(&it->second.orders);
    return out;
}

std::vector<AgentOffer> AgentRegistry::alive_agents() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<AgentOffer> out;
    const auto now = Clock::now();
    for (const auto& [id, e] : agents_) {
        if (now - e.last_beat > timeout_ || e.draining) continue;
        out.push_back({id, e.info.hostname(), e.info.gpus_size(), e.info.cpu_ranks()});
    }
    std::sort(out.begin(), out.end(),
              [](const AgentOffer& a, const AgentOffer& b) { return a.hostname < b.hostname; });
    return out;
}

bool AgentRegistry::is_alive(const std::string& agent_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    return it != agents_.end() && Clock::now() - it->second.last_beat <= timeout_;
}

bool AgentRegistry::is_draining(const std::string& agent_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    return it != agents_.end() && it->second.draining;
}

std::string AgentRegistry::hostname(const std::string& agent_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    return it == agents_.end() ? "" : it->second.info.hostname();
}

void AgentRegistry::order_launch(const std::string& agent_id, v1::LaunchOrder order) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it != agents_.end()) *it->second.orders.add_launches() = std::move(order);
}

void AgentRegistry::order_terminate(const std::string& agent_id, v1::TerminateOrder order) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it != agents_.end()) *it->second.orders.add_terminates() = std::move(order);
}

}  // namespace deltatune::daemon
