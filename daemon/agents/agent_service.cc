#include "daemon/agents/agent_service.h"

#include "daemon/grpc_status.h"

namespace deltatune::daemon {
namespace {

grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* ctx, const absl::Status& s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* AgentServiceImpl::RegisterAgent(grpc::CallbackServerContext* ctx,
                                                          const v1::RegisterAgentRequest* request,
                                                          v1::RegisterAgentResponse* response) {
    absl::Status s = auth_.check(*ctx);
    if (s.ok()) {
        auto registered = registry_->register_agent(request->info());
        s = registered.status();
        if (s.ok()) *response = *std::move(registered);
    }
    return finish(ctx, s);
}

grpc::ServerUnaryReactor* AgentServiceImpl::AgentHeartbeat(grpc::CallbackServerContext* ctx,
                                                           const v1::AgentHeartbeatRequest* request,
                                                           v1::AgentHeartbeatResponse* response) {
    const absl::Status s = auth_.check(*ctx);
    if (s.ok()) response->set_register_again(!registry_->heartbeat(request->agent_id()));
    return finish(ctx, s);
}

grpc::ServerUnaryReactor* AgentServiceImpl::ListAgents(grpc::CallbackServerContext* ctx,
                                                       const v1::ListAgentsRequest*,
                                                       v1::ListAgentsResponse* response) {
    const absl::Status s = auth_.check(*ctx);
    if (s.ok()) {
        for (v1::Agent& a : registry_->list()) *response->add_agents() = std::move(a);
    }
    return finish(ctx, s);
}

}  // namespace deltatune::daemon
