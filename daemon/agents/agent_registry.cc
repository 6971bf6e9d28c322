#include "daemon/agents/agent_registry.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "daemon/random_hex.h"

namespace deltatune::daemon {
namespace {

bool printable(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 127; });
}

absl::Status bad(const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("agent info: ", field, " ", why));
}

// Compares in time independent of where they differ.
bool same_secret(const std::string& a, const std::string& b) {
    if (a.size() != b.size() || a.empty()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

}  // namespace

absl::Status validate_agent_info(const v1::AgentInfo& info) {
    const std::string& host = info.hostname();
    if (host.empty() || host.size() > 253 || !std::all_of(host.begin(), host.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
        })) {
        return bad("hostname", "must be 1-253 bytes of letters, digits, '-', '_' and '.'");
    }
    if (info.address().size() > 255 || !printable(info.address())) {
        return bad("address", "must be at most 255 printable bytes");
    }
    if (info.cpu_ranks() < 0 || info.cpu_ranks() > 4096) {
        return bad("cpu_ranks", absl::StrCat("(", info.cpu_ranks(), ") must be in [0, 4096]"));
    }
    if (info.gpus_size() > 256) return bad("gpus", absl::StrCat("(", info.gpus_size(), ") > 256"));
    std::vector<bool> seen(1024, false);
    for (const v1::AgentGpu& g : info.gpus()) {
        if (g.index() < 0 || g.index() >= 1024 || seen[static_cast<size_t>(g.index())]) {
            return bad("gpus", absl::StrCat("index ", g.index(), " out of [0, 1024) or repeated"));
        }
        seen[static_cast<size_t>(g.index())] = true;
        if (g.name().size() > 256 || g.memory_bytes() < 0 ||
            std::any_of(g.name().begin(), g.name().end(), [](char c) { return c < ' '; })) {
            return bad("gpus", absl::StrCat("index ", g.index(),
                                            ": a name of at most 256 bytes "
                                            "without control characters and "
                                            "memory >= 0 are required"));
        }
    }
    if (info.version().size() > 64 || !printable(info.version())) {
        return bad("version", "must be at most 64 printable bytes");
    }
    return absl::OkStatus();
}

void AgentRegistry::forget_expired() {
    const auto now = Clock::now();
    for (auto it = agents_.begin(); it != agents_.end();) {
        it = now - it->second.last_beat > expiry_ ? agents_.erase(it) : std::next(it);
    }
}

absl::StatusOr<v1::RegisterAgentResponse> AgentRegistry::register_agent(
    const v1::AgentInfo& info, const std::string& previous_secret) {
    if (absl::Status s = validate_agent_info(info); !s.ok()) return s;
    v1::RegisterAgentResponse out;
    out.set_agent_id("agent-" + random_hex(16));
    out.set_agent_secret(random_hex(32));
    out.set_heartbeat_seconds(static_cast<int32_t>(
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(interval_).count())));
    std::lock_guard<std::mutex> lock(mu_);
    forget_expired();
    const auto now = Clock::now();
    for (auto it = agents_.begin(); it != agents_.end();) {  // one entry per host
        const Entry& e = it->second;
        if (e.info.hostname() != info.hostname()) {
            ++it;
            continue;
        }
        if (now - e.last_beat <= timeout_ && !same_secret(previous_secret, e.secret)) {
            return absl::AlreadyExistsError(absl::StrCat(
                "agent info: hostname ", info.hostname(), " belongs to ", it->first,
                ", which is alive; it registers again with its secret, or another may once it "
                "has been silent for ",
                std::chrono::duration_cast<std::chrono::seconds>(timeout_).count(), " s"));
        }
        it = agents_.erase(it);
    }
    size_t info_bytes = info.ByteSizeLong();
    for (const auto& [id, e] : agents_) info_bytes += e.info.ByteSizeLong();
    if (agents_.size() >= kMaxAgents || info_bytes > kMaxInfoBytes) {
        return absl::ResourceExhaustedError(absl::StrCat("agent registry full (at most ",
                                                         kMaxAgents, " agents and ", kMaxInfoBytes,
                                                         " bytes of their descriptions)"));
    }
    agents_[out.agent_id()] = Entry{info, out.agent_secret(), now, {}, false};
    return out;
}

absl::Status AgentRegistry::authenticate(const std::string& agent_id,
                                         const std::string& secret) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it == agents_.end()) {
        return absl::NotFoundError(
            absl::StrCat("agent ", agent_id.substr(0, 64), " is not registered"));
    }
    if (!same_secret(secret, it->second.secret)) {
        return absl::PermissionDeniedError(
            absl::StrCat("agent ", agent_id, ": the call does not carry the agent's secret"));
    }
    return absl::OkStatus();
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
        if (now - e.last_beat > expiry_) continue;  // forgotten at the next registration
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

std::optional<v1::AgentPollResponse> AgentRegistry::poll(const std::string& agent_id, bool draining,
                                                         bool leaving) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it == agents_.end()) return std::nullopt;
    if (leaving) {
        agents_.erase(it);
        return v1::AgentPollResponse();
    }
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
