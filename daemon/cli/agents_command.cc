// deltatune agents: the node agents a supervisor deltatuned knows (docs/multinode.md), one line
// each, or --output json.
#include <cstdio>
#include <memory>

#include "absl/strings/str_format.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "deltatune/v1/agent.grpc.pb.h"

namespace deltatune::cli {
namespace {

std::string agent_line(const v1::Agent& a) {
    const v1::AgentInfo& i = a.info();
    const char* state = a.draining() ? "DRAINING" : v1::Agent::State_Name(a.state()).c_str();
    return absl::StrFormat("%-24s %-9s %2d GPU(s) %3d CPU rank(s)  %-22s heartbeat %.1f s ago",
                           i.hostname(), state, i.gpus_size(), i.cpu_ranks(), i.address(),
                           a.seconds_since_heartbeat());
}

int list_agents(const ClientFlags& flags) {
    auto client = JobClient::connect(flags);
    if (!client.ok()) return fail("agents", client.status());
    auto stub = v1::AgentService::NewStub(client->channel());
    v1::ListAgentsResponse resp;
    auto ctx = client->context();
    const grpc::Status s = stub->ListAgents(ctx.get(), v1::ListAgentsRequest(), &resp);
    if (!s.ok()) return report_rpc_error(s);
    if (client->json()) {
        std::printf("%s\n", to_json(resp).c_str());
        return 0;
    }
    if (resp.agents().empty()) std::printf("no node agents registered\n");
    for (const v1::Agent& a : resp.agents()) std::printf("%s\n", agent_line(a).c_str());
    return 0;
}

}  // namespace

CommandRun agents_command(CLI::App& app) {
    auto flags = std::make_shared<ClientFlags>();
    add_client_flags(app, *flags);
    return [flags] { return list_agents(*flags); };
}

}  // namespace deltatune::cli
