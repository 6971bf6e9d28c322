// AgentService (agent.proto) on the supervisor's public port: node agents register and
// heartbeat into the AgentRegistry, behind the same bearer tokens as the job API.
#pragma once

#include <grpcpp/grpcpp.h>

#include "daemon/agents/agent_registry.h"
#include "daemon/service/auth.h"
#include "deltatune/v1/agent.grpc.pb.h"

namespace deltatune::daemon {

class AgentServiceImpl final : public v1::AgentService::CallbackService {
  public:
    AgentServiceImpl(AgentRegistry* registry, Authenticator auth)
        : registry_(registry), auth_(std::move(auth)) {}
    grpc::ServerUnaryReactor* RegisterAgent(grpc::CallbackServerContext* ctx,
                                            const v1::RegisterAgentRequest* request,
                                            v1::RegisterAgentResponse* response) override;
    grpc::ServerUnaryReactor* AgentHeartbeat(grpc::CallbackServerContext* ctx,
                                             const v1::AgentHeartbeatRequest* request,
                                             v1::AgentHeartbeatResponse* response) override;
    grpc::ServerUnaryReactor* ListAgents(grpc::CallbackServerContext* ctx,
                                         const v1::ListAgentsRequest* request,
                                         v1::ListAgentsResponse* response) override;

  private:
    AgentRegistry* registry_;
    Authenticator auth_;
};

}  // namespace deltatune::daemon
