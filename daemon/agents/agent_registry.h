// The supervisor's registry of node agents (docs/multinode.md): who registered, what each node
// offers, whether it still heartbeats, and the orders waiting for its next poll. Thread-safe; in
// memory only (an agent registers again when a restarted supervisor does not know its id).
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
    AgentRegistry(std::chrono::milliseconds interval, std::chrono::milliseconds timeout)
        : interval_(interval), timeout_(timeout) {}

    // A fresh id for the node; InvalidArgument for an info without a hostname or with a
    // negative CPU rank count. A host that registers again replaces its old entry.
    absl::StatusOr<v1::RegisterAgentResponse> register_agent(const v1::AgentInfo& info);
    // False for an id the registry does not know (the agent must register again).
    bool heartbeat(const std::string& agent_id);
    std::vector<v1::Agent> list() const;  // by hostname
    // A poll is a heartbeat that also takes the agent's orders (and says whether it drains);
    // nullopt for an unknown id.
    std::optional<v1::AgentPollResponse> poll(const std::string& agent_id, bool draining = false);

    std::vector<AgentOffer> alive_agents() const override;
    bool is_alive(const std::string& agent_id) const override;
    bool is_draining(const std::string& agent_id) const override;
    std::string hostname(const std::string& agent_id) const override;
    void order_launch(const std::string& agent_id, v1::LaunchOrder order) override;
    void order_terminate(const std::string& agent_id, v1::TerminateOrder order) override;

  private:
    struct Entry {
        v1::AgentInfo info;
        Clock::time_point last_beat;
        v1::AgentPollResponse orders;  // until the next poll
        bool draining = false;
    };
    std::chrono::milliseconds interval_, timeout_;
    mutable std::mutex mu_;
    std::map<std::string, Entry> agents_;  // by id
};

}  // namespace deltatune::daemon
