// What the scheduler needs of the node agents (docs/multinode.md), so daemon/jobs does not depend
// on how agents are reached: the live ones with what they offer, and a mailbox of orders each
// agent collects on its next poll. AgentRegistry implements it.
#pragma once

#include <string>
#include <vector>

#include "deltatune/v1/agent.pb.h"

namespace deltatune::daemon {

struct AgentOffer {
    std::string agent_id;
    std::string hostname;
    int gpus = 0;
    int cpu_ranks = 0;
};

class RemoteRanks {
  public:
    virtual ~RemoteRanks() = default;
    // Agents heartbeating now and not draining, sorted by hostname (placement is deterministic).
    virtual std::vector<AgentOffer> alive_agents() const = 0;
    // False once the agent is LOST or has registered again under a new id.
    virtual bool is_alive(const std::string& agent_id) const = 0;
    // The agent is shutting down: the jobs it runs ranks for should checkpoint and move.
    virtual bool is_draining(const std::string& agent_id) const = 0;
    virtual std::string hostname(const std::string& agent_id) const = 0;  // "" when unknown
    virtual void order_launch(const std::string& agent_id, v1::LaunchOrder order) = 0;
    virtual void order_terminate(const std::string& agent_id, v1::TerminateOrder order) = 0;
};

}  // namespace deltatune::daemon
