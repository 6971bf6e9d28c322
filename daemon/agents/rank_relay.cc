#include "daemon/agents/rank_relay.h"

#include <chrono>

namespace deltatune::daemon {
namespace {

// One forwarded call: the upstream context and request live until its callback.
template <typename Request>
struct Call {
    grpc::ClientContext upstream;
    Request request;
    grpc::ServerUnaryReactor* reactor = nullptr;
};

// Sends `request` upstream with `send` (one AgentService async method) and finishes the rank's
// call with the supervisor's status once it answers into `response`.
template <typename Request, typename Response, typename Send>
grpc::ServerUnaryReactor* forward(grpc::CallbackServerContext* ctx, const std::string& token,
                                  Request request, Response* response, Send send) {
    auto* c = new Call<Request>;
    // The callback may run (and delete `c`) before `send` returns: a failed channel answers at
    // once. The reactor is returned from a local.
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    c->reactor = reactor;
    // The rank's own deadline, capped: a supervisor that does not answer fails the call.
    const auto cap = std::chrono::system_clock::now() + std::chrono::seconds(30);
    c->upstream.set_deadline(std::min(ctx->deadline(), cap));
    if (!token.empty()) c->upstream.AddMetadata("authorization", "Bearer " + token);
    c->request = std::move(request);
    send(&c->upstream, &c->request, response, [c](grpc::Status s) {
        c->reactor->Finish(s);
        delete c;
    });
    return reactor;
}

// An upstream request carrying who the agent is.
template <typename Request>
Request signed_by(const AgentIdentity& me) {
    Request up;
    up.set_agent_id(me.id);
    up.set_agent_secret(me.secret);
    return up;
}

}  // namespace

grpc::ServerUnaryReactor* RankRelay::Report(grpc::CallbackServerContext* ctx,
                                            const v1::RankReport* request,
                                            v1::RankDirective* response) {
    auto up = signed_by<v1::RelayReportRequest>(agent_id_());
    *up.mutable_report() = *request;
    return forward(ctx, token_, std::move(up), response,
                   [this](auto... args) { stub_->async()->RelayReport(args...); });
}

grpc::ServerUnaryReactor* RankRelay::StoreSet(grpc::CallbackServerContext* ctx,
                                              const v1::StoreSetRequest* request,
                                              v1::StoreSetResponse* response) {
    auto up = signed_by<v1::RelayStoreSetRequest>(agent_id_());
    *up.mutable_request() = *request;
    return forward(ctx, token_, std::move(up), response,
                   [this](auto... args) { stub_->async()->RelayStoreSet(args...); });
}

grpc::ServerUnaryReactor* RankRelay::StoreGet(grpc::CallbackServerContext* ctx,
                                              const v1::StoreGetRequest* request,
                                              v1::StoreGetResponse* response) {
    auto up = signed_by<v1::RelayStoreGetRequest>(agent_id_());
    *up.mutable_request() = *request;
    return forward(ctx, token_, std::move(up), response,
                   [this](auto... args) { stub_->async()->RelayStoreGet(args...); });
}

}  // namespace deltatune::daemon
