// AgentService (agent.proto) on the supervisor's public port: node agents register, heartbeat
// and poll for orders through the AgentRegistry, report their ranks' exits to the JobManager and
// relay their ranks' protocol, behind the same bearer tokens as the job API.
#pragma once

#include <grpcpp/grpcpp.h>

#include "daemon/agents/agent_registry.h"
#include "daemon/auth.h"
#include "daemon/jobs/job_manager.h"
#include "deltatune/v1/agent.grpc.pb.h"

namespace deltatune::daemon {

class AgentServiceImpl final : public v1::AgentService::CallbackService {
  public:
    AgentServiceImpl(AgentRegistry* registry, JobManager* manager, Authenticator auth)
        : registry_(registry), manager_(manager), auth_(std::move(auth)) {}
    grpc::ServerUnaryReactor* RegisterAgent(grpc::CallbackServerContext* ctx,
                                            const v1::RegisterAgentRequest* request,
                                            v1::RegisterAgentResponse* response) override;
    grpc::ServerUnaryReactor* AgentHeartbeat(grpc::CallbackServerContext* ctx,
                                             const v1::AgentHeartbeatRequest* request,
                                             v1::AgentHeartbeatResponse* response) override;
    grpc::ServerUnaryReactor* ListAgents(grpc::CallbackServerContext* ctx,
                                         const v1::ListAgentsRequest* request,
                                         v1::ListAgentsResponse* response) override;
    grpc::ServerUnaryReactor* AgentPoll(grpc::CallbackServerContext* ctx,
                                        const v1::AgentPollRequest* request,
                                        v1::AgentPollResponse* response) override;
    grpc::ServerUnaryReactor* RelayReport(grpc::CallbackServerContext* ctx,
                                          const v1::RelayReportRequest* request,
                                          v1::RankDirective* response) override;
    grpc::ServerUnaryReactor* RelayStoreSet(grpc::CallbackServerContext* ctx,
                                            const v1::RelayStoreSetRequest* request,
                                            v1::StoreSetResponse* response) override;
    grpc::ServerUnaryReactor* RelayStoreGet(grpc::CallbackServerContext* ctx,
                                            const v1::RelayStoreGetRequest* request,
                                            v1::StoreGetResponse* response) override;

  private:
    // The bearer token, then the agent's own secret for `agent_id` (NotFound: not registered).
    absl::Status check_agent(const grpc::CallbackServerContext& ctx, const std::string& agent_id,
                             const std::string& secret) const;

    AgentRegistry* registry_;
    JobManager* manager_;
    Authenticator auth_;
};

}  // namespace deltatune::daemon
