// RankRelay: a rank's call relayed to a supervisor that cannot be reached fails with the
// supervisor's status, and the agent survives it. Once, the relay read its call's reactor after
// the failed upstream call had already freed it: agents crashed when the supervisor restarted.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include "daemon/agents/rank_relay.h"
#include "deltatune/v1/rank.grpc.pb.h"

namespace deltatune::daemon {
namespace {

TEST_CASE("a relay to an unreachable supervisor answers its ranks UNAVAILABLE",
          "[daemon][agents]") {
    // Port 1 on loopback refuses at once: the upstream call fails while it is being started.
    auto supervisor = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
    RankRelay relay(supervisor, "token", [] { return AgentIdentity{"agent-1", "secret"}; });
    grpc::ServerBuilder builder;
    builder.RegisterService(&relay);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    auto rank = v1::RankService::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
    // Calls whose deadline passes on the way fail upstream before they start.
    for (int i = 0; i < 3000; ++i) {
        grpc::ClientContext ctx;
        const bool late = i % 2 == 1;
        ctx.set_deadline(
            std::chrono::system_clock::now() +
            (late ? std::chrono::microseconds(i % 400 * 5) : std::chrono::seconds(10)));
        v1::StoreGetRequest get;
        get.set_key("k");
        v1::StoreGetResponse got;
        const grpc::Status s = rank->StoreGet(&ctx, get, &got);
        if (late) {
            REQUIRE((s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                     s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED));
        } else {
            REQUIRE(s.error_code() == grpc::StatusCode::UNAVAILABLE);
        }
    }
    server->Shutdown();
}

}  // namespace
}  // namespace deltatune::daemon
