// The supervisor's registry of node agents (docs/multinode.md): who registered, what each node
// offers, and whether it still heartbeats. Thread-safe; in memory only (an agent registers again
// when a restarted supervisor does not know its id).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deltatune/v1/agent.pb.h"

namespace deltatune::daemon {

class AgentRegistry {
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
    std::vector<v1::Agent> list() const;

  private:
    struct Entry {
        v1::AgentInfo info;
        Clock::time_point last_beat;
    };
    std::chrono::milliseconds interval_, timeout_;
    mutable std::mutex mu_;
    std::map<std::string, Entry> agents_;  // by id
};

}  // namespace deltatune::daemon
