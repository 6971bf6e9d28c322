// A node agent's end of the rank protocol: its ranks keep talking RankService on a local unix
// socket, exactly as under a one-machine daemon, and the agent forwards each call to the
// supervisor's AgentService (Relay*) with its id, its secret and the bearer token. Calls are
// forwarded asynchronously; the supervisor's answer (or error) is the rank's.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "deltatune/v1/agent.grpc.pb.h"
#include "deltatune/v1/rank.grpc.pb.h"

namespace deltatune::daemon {

// Who the agent is to the supervisor: its registration's id and secret.
struct AgentIdentity {
    std::string id, secret;
};

class RankRelay final : public v1::RankService::CallbackService {
  public:
    // `agent_id` is read per call: it changes when the agent registers again.
    RankRelay(std::shared_ptr<grpc::Channel> supervisor, std::string token,
              std::function<AgentIdentity()> agent_id)
        : stub_(v1::AgentService::NewStub(std::move(supervisor))),
          token_(std::move(token)),
          agent_id_(std::move(agent_id)) {}

    grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                     const v1::RankReport* request,
                                     v1::RankDirective* response) override;
    grpc::ServerUnaryReactor* StoreSet(grpc::CallbackServerContext* ctx,
                                       const v1::StoreSetRequest* request,
                                       v1::StoreSetResponse* response) override;
    grpc::ServerUnaryReactor* StoreGet(grpc::CallbackServerContext* ctx,
                                       const v1::StoreGetRequest* request,
                                       v1::StoreGetResponse* response) override;

  private:
    std::unique_ptr<v1::AgentService::Stub> stub_;
    std::string token_;
    std::function<AgentIdentity()> agent_id_;
};

}  // namespace deltatune::daemon
