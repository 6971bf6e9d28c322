#include "daemon/agents/agent_service.h"

#include "absl/strings/str_cat.h"
#include "daemon/grpc_status.h"

namespace deltatune::daemon {
absl::Status AgentServiceImpl::check_agent(const grpc::CallbackServerContext& ctx,
                                           const std::string& agent_id,
                                           const std::string& secret) const {
    absl::Status s = auth_.check(ctx);
    if (s.ok()) s = registry_->authenticate(agent_id, secret);
    return s;
}

grpc::ServerUnaryReactor* AgentServiceImpl::RegisterAgent(grpc::CallbackServerContext* ctx,
                                                          const v1::RegisterAgentRequest* request,
                                                          v1::RegisterAgentResponse* response) {
    absl::Status s = auth_.check(*ctx);
    if (s.ok()) {
        auto registered = registry_->register_agent(request->info(), request->previous_secret());
        s = registered.status();
        if (s.ok()) *response = *std::move(registered);
    }
    return finish_unary(ctx, s);
}

grpc::ServerUnaryReactor* AgentServiceImpl::AgentHeartbeat(grpc::CallbackServerContext* ctx,
                                                           const v1::AgentHeartbeatRequest* request,
                                                           v1::AgentHeartbeatResponse* response) {
    absl::Status s = check_agent(*ctx, request->agent_id(), request->agent_secret());
    if (absl::IsNotFound(s)) {  // the supervisor restarted or forgot the agent
        response->set_register_again(true);
        return finish_unary(ctx, absl::OkStatus());
    }
    if (s.ok()) registry_->heartbeat(request->agent_id());
    return finish_unary(ctx, s);
}

grpc::ServerUnaryReactor* AgentServiceImpl::ListAgents(grpc::CallbackServerContext* ctx,
                                                       const v1::ListAgentsRequest*,
                                                       v1::ListAgentsResponse* response) {
    const absl::Status s = auth_.check(*ctx);
    if (s.ok()) {
        for (v1::Agent& a : registry_->list()) *response->add_agents() = std::move(a);
    }
    return finish_unary(ctx, s);
}

grpc::ServerUnaryReactor* AgentServiceImpl::AgentPoll(grpc::CallbackServerContext* ctx,
                                                      const v1::AgentPollRequest* request,
                                                      v1::AgentPollResponse* response) {
    absl::Status s = check_agent(*ctx, request->agent_id(), request->agent_secret());
    if (absl::IsNotFound(s)) {  // its ranks' attempts ended when it was lost
        response->set_register_again(true);
        return finish_unary(ctx, absl::OkStatus());
    }
    if (!s.ok()) return finish_unary(ctx, s);
    for (const v1::RemoteRankExit& e : request->exits()) {
        manager_->on_remote_rank_exit(request->agent_id(), e);
    }
    std::optional<v1::AgentPollResponse> orders =
        registry_->poll(request->agent_id(), request->draining(), request->leaving());
    if (orders) {
        *response = std::move(*orders);
    } else {
        response->set_register_again(true);
    }
    return finish_unary(ctx, absl::OkStatus());
}

namespace {
absl::Status not_placed(const std::string& agent, const std::string& job, int attempt) {
    return absl::FailedPreconditionError(
        absl::StrCat(job, " attempt ", attempt, " runs no rank on agent ", agent));
}
}  // namespace

grpc::ServerUnaryReactor* AgentServiceImpl::RelayReport(grpc::CallbackServerContext* ctx,
                                                        const v1::RelayReportRequest* request,
                                                        v1::RankDirective* response) {
    absl::Status s = check_agent(*ctx, request->agent_id(), request->agent_secret());
    const v1::RankReport& r = request->report();
    if (s.ok() && !manager_->placed_on(request->agent_id(), r.job(), r.attempt(), r.rank())) {
        // A rank of an attempt that ended (or never ran here): it stops, as a local one would.
        response->set_action(v1::RankDirective::EXIT_NOW);
        return finish_unary(ctx, absl::OkStatus());
    }
    if (s.ok()) *response = manager_->on_rank_report(r);
    return finish_unary(ctx, s);
}

grpc::ServerUnaryReactor* AgentServiceImpl::RelayStoreSet(grpc::CallbackServerContext* ctx,
                                                          const v1::RelayStoreSetRequest* request,
                                                          v1::StoreSetResponse*) {
    absl::Status s = check_agent(*ctx, request->agent_id(), request->agent_secret());
    const v1::StoreSetRequest& r = request->request();
    if (s.ok() && !manager_->placed_on(request->agent_id(), r.job(), r.attempt(), -1)) {
        s = not_placed(request->agent_id(), r.job(), r.attempt());
    }
    if (s.ok()) s = manager_->store_set(r.job(), r.attempt(), r.key(), r.value());
    return finish_unary(ctx, s);
}

grpc::ServerUnaryReactor* AgentServiceImpl::RelayStoreGet(grpc::CallbackServerContext* ctx,
                                                          const v1::RelayStoreGetRequest* request,
                                                          v1::StoreGetResponse* response) {
    absl::Status s = check_agent(*ctx, request->agent_id(), request->agent_secret());
    const v1::StoreGetRequest& r = request->request();
    if (s.ok() && !manager_->placed_on(request->agent_id(), r.job(), r.attempt(), -1)) {
        s = not_placed(request->agent_id(), r.job(), r.attempt());
    }
    if (s.ok()) {
        auto value = manager_->store_get(r.job(), r.attempt(), r.key());
        s = value.status();
        if (s.ok() && value->has_value()) {
            response->set_found(true);
            response->set_value(**value);
        }
    }
    return finish_unary(ctx, s);
}

}  // namespace deltatune::daemon
