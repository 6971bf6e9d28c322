#include "daemon/agents/agent_registry.h"

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
    agents_[out.agent_id()] = Entry{info, Clock::now()};
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
    }
    return out;
}

}  // namespace deltatune::daemon
