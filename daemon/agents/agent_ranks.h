// The ranks a node agent runs for its supervisor (docs/multinode.md): each LaunchOrder's ranks
// spawned by a RankLauncher (the supervisor's own class: process groups, logs, a reaper), their
// exits kept for the next poll, TerminateOrders applied to one attempt at a time.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "daemon/jobs/rank_launcher.h"
#include "deltatune/v1/agent.pb.h"

namespace deltatune::daemon {

class AgentRanks {
  public:
    // Ranks report to `rank_socket` (the agent's relay), listen for peers on `address`, and log
    // to <state_dir>/jobs/<id>/attempt-<n>/rank-<r>.log.
    AgentRanks(std::string state_dir, std::string rank_socket, std::string address,
               std::string executable);

    // Starts the order's ranks. One that cannot start is reported as exited with code 127.
    void launch(const v1::LaunchOrder& order);
    // Reports the order's ranks as exited with code 127 without starting them.
    void refuse(const v1::LaunchOrder& order, const std::string& why);
    void terminate(const v1::TerminateOrder& order);
    void kill_all();  // the supervisor no longer knows this agent: its ranks are orphans
    bool idle();      // no rank running
    // Exits since the last call; give back what a failed poll did not deliver.
    std::vector<v1::RemoteRankExit> take_exits();
    void give_back(std::vector<v1::RemoteRankExit> exits);

  private:
    using AttemptKey = std::pair<std::string, int>;  // (job id, attempt)
    void exited(const RankExit& e);

    std::string state_dir_, rank_socket_, address_, executable_;
    std::mutex mu_;
    std::vector<v1::RemoteRankExit> exits_;
    std::map<AttemptKey, std::vector<RankPid>> running_;
    RankLauncher launcher_;  // last: its reaper calls exited()
};

}  // namespace deltatune::daemon
