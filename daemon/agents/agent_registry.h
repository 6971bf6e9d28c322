// The supervisor's registry of node agents (docs/multinode.md): who registered, what each node
// offers, whether it still heartbeats, and the orders waiting for its next poll. Thread-safe; in
// memory only (an agent registers again when a restarted supervisor does not know its id).
//
// Ids are public; each registration also gets a secret (128 random bits) that the agent's calls
// carry and authenticate() checks. The registry is bounded (kMaxAgents) and forgets an agent
// LOST for longer than its expiry; what an agent says of itself is validated.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/jobs/remote_ranks.h"
#include "deltatune/v1/agent.pb.h"

namespace deltatune::daemon {

class AgentRegistry final : public RemoteRanks {
  public:
    using Clock = std::chrono::steady_clock;
    // An agent is LOST after `timeout` without a heartbeat; agents are asked to beat every
    // `interval`.
    static constexpr size_t kMaxAgents = 4096;
    // What the agents say of themselves, in all: ListAgents stays within a default gRPC client's
    // 4 MB message limit however the registry was filled.
    static constexpr size_t kMaxInfoBytes = size_t{3} << 20;
    // LOST entries are forgotten after `expiry` (default: 10 x timeout).
    AgentRegistry(std::chrono::milliseconds interval, std::chrono::milliseconds timeout,
                  std::chrono::milliseconds expiry = std::chrono::milliseconds(0))
        : interval_(interval),
          timeout_(timeout),
          expiry_(expiry.count() > 0 ? expiry : 10 * timeout) {}

    // A fresh id and secret for the node. InvalidArgument for an info that is not a plausible
    // machine (validate_agent_info); AlreadyExists while another ALIVE agent holds the hostname
    // and `previous_secret` is not its secret; ResourceExhausted past kMaxAgents or kMaxInfoBytes.
    absl::StatusOr<v1::RegisterAgentResponse> register_agent(
        const v1::AgentInfo& info, const std::string& previous_secret = "");
    // NotFound for an id the registry does not know (the agent must register again),
    // PermissionDenied when `secret` is not the id's.
    absl::Status authenticate(const std::string& agent_id, const std::string& secret) const;
    // False for an id the registry does not know (the agent must register again).
    bool heartbeat(const std::string& agent_id);
    std::vector<v1::Agent> list() const;  // by hostname
    // A poll is a heartbeat that also takes the agent's orders (and says whether it drains);
    // nullopt for an unknown id.
    // `leaving`: the agent exits now; it is forgotten (not listed, not alive) at once.
    std::optional<v1::AgentPollResponse> poll(const std::string& agent_id, bool draining = false,
                                              bool leaving = false);

    std::vector<AgentOffer> alive_agents() const override;
    bool is_alive(const std::string& agent_id) const override;
    bool is_draining(const std::string& agent_id) const override;
    std::string hostname(const std::string& agent_id) const override;
    void order_launch(const std::string& agent_id, v1::LaunchOrder order) override;
    void order_terminate(const std::string& agent_id, v1::TerminateOrder order) override;

  private:
    struct Entry {
        v1::AgentInfo info;
        std::string secret;
        Clock::time_point last_beat;
        v1::AgentPollResponse orders;  // until the next poll
        bool draining = false;
    };
    void forget_expired();  // mu_ held

    std::chrono::milliseconds interval_, timeout_, expiry_;
    mutable std::mutex mu_;
    std::map<std::string, Entry> agents_;  // by id
};

// What an agent may say of itself: a hostname of 1-253 bytes of letters, digits, '-', '_' and '.';
// an address of at most 255 printable bytes; 0-4096 CPU ranks; at most 256 GPUs with distinct
// indexes in [0, 1024), names of at most 256 printable bytes, memory >= 0; a version of at most
// 64 printable bytes. InvalidArgument naming the field otherwise.
absl::Status validate_agent_info(const v1::AgentInfo& info);

}  // namespace deltatune::daemon
