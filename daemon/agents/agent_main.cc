#include "daemon/agents/agent_main.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/agents/agent_ranks.h"
#include "daemon/agents/agent_state_dir.h"
#include "daemon/agents/rank_relay.h"
#include "daemon/auth.h"
#include "daemon/command_line.h"
#include "daemon/config/daemon_config.h"
#include "daemon/rank/rank_socket.h"
#include "deltatune/v1/agent.grpc.pb.h"
#include "deltatune/v1/job.pb.h"
#include "runtime/device/device_context.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune::daemon {
namespace {

volatile sig_atomic_t g_stop = 0;  // set by SIGTERM / SIGINT: the loop ends between beats

struct AgentArgs {
    std::string supervisor, token_file, hostname, address, state_dir, ca_file;
    int cpu_ranks = 0;
    int drain_seconds = 90;
    bool plaintext_token = false;  // the token may cross the network unencrypted
};

// The agent's command line; help from the same declarations.
void declare_flags(CLI::App& app, AgentArgs& a) {
    app.description(
        "a node agent: registers this machine with a supervisor deltatuned, heartbeats, and runs\n"
        "the ranks it is given (docs/multinode.md). On SIGTERM its jobs checkpoint and move to\n"
        "other agents.");
    app.add_option("--supervisor", a.supervisor, "the supervisor's gRPC address")
        ->required()
        ->type_name("HOST:PORT");
    app.add_option("--token-file", a.token_file, "the bearer token, read as the daemon reads it")
        ->type_name("F");
    app.add_option("--hostname", a.hostname, "this machine's name (default: its hostname)")
        ->type_name("H");
    app.add_option("--address", a.address,
                   "where this machine's ranks are reached by their peers (default: the hostname)")
        ->type_name("A");
    add_count(app, "--cpu-ranks", a.cpu_ranks, "CPU ranks it runs at once");
    app.add_option("--state-dir", a.state_dir,
                   "rank logs and specs, a folder of this user's only (default\n"
                   "/var/lib/deltatune-agent/<hostname> as root, else\n"
                   "~/.local/state/deltatune/agent-<hostname>)")
        ->type_name("D");
    add_count(app, "--drain-seconds", a.drain_seconds,
              "on SIGTERM, ranks still running after this long are killed")
        ->type_name("S");
    app.add_option("--ca-file", a.ca_file,
                   "TLS to the supervisor, its certificate checked against this CA (or\n"
                   "$DELTATUNE_CA_FILE, or $DELTATUNE_TLS=1 for the system's CAs)")
        ->type_name("F");
    one_of(app.add_option_function<std::string>(
               "--plaintext-token", [&a](const std::string&) { a.plaintext_token = true; },
               "send the token unencrypted to a supervisor beyond loopback (a network you trust)"),
           {"allow"});
}

// The hostname's and state folder's defaults, and no token sent in plaintext beyond this machine
// unless allowed.
absl::Status check_agent_args(AgentArgs* a) {
    if (a->hostname.empty()) {
        char host[256] = {};
        gethostname(host, sizeof(host) - 1);
        a->hostname = host;
    }
    if (a->state_dir.empty()) {
        absl::StatusOr<std::string> dir = default_agent_state_dir(a->hostname);
        if (!dir.ok()) return dir.status();
        a->state_dir = *dir;
    }
    if (!a->token_file.empty() && !client_uses_tls(a->ca_file, false) && !a->plaintext_token &&
        !is_loopback_address(a->supervisor)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "refusing to send the token in plaintext to ", a->supervisor,
            ": give --ca-file (the supervisor's CA; TLS), or --plaintext-token allow on a "
            "network you trust"));
    }
    return absl::OkStatus();
}

// This machine as the supervisor needs to know it.
v1::AgentInfo describe(const AgentArgs& a) {
    v1::AgentInfo info;
    info.set_hostname(a.hostname);  // check_agent_args filled the default
    info.set_address(a.address.empty() ? info.hostname() : a.address);
    info.set_cpu_ranks(a.cpu_ranks);
    info.set_version(DT_VERSION);
#if DELTATUNE_HAVE_CUDA
    const int n = cuda_device_count();
    for (int d = 0; d < n; ++d) {
        cudaDeviceProp p{};
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
        v1::AgentGpu* g = info.add_gpus();
        g->set_index(d), g->set_name(p.name);
        g->set_memory_bytes(static_cast<int64_t>(p.totalGlobalMem));
    }
#endif
    return info;
}

class Agent {
  public:
    Agent(const AgentArgs& args, std::string token,
          std::shared_ptr<grpc::ChannelCredentials> credentials)
        : info_(describe(args)),
          token_(std::move(token)),
          channel_(grpc::CreateChannel(args.supervisor, std::move(credentials))),
          stub_(v1::AgentService::NewStub(channel_)),
          state_dir_(args.state_dir),
          drain_(std::chrono::seconds(args.drain_seconds)),
          relay_(channel_, token_, [this] { return identity(); }) {}

    // Registers, then polls (a poll is a heartbeat) until SIGTERM; 1 when the supervisor refuses
    // the token, 2 when the rank socket cannot be served.
    int run() {
        if (absl::Status s = prepare_private_dir(state_dir_); !s.ok()) {
            std::fprintf(stderr, "deltatuned agent: %s\n", std::string(s.message()).c_str());
            return 2;
        }
        const std::string socket = state_dir_ + "/rank.sock";
        auto server = start_rank_server(&relay_, socket);
        if (!server.ok()) {
            std::fprintf(stderr, "deltatuned agent: state dir %s: %s\n", state_dir_.c_str(),
                         std::string(server.status().message()).c_str());
            return 2;
        }
        std::error_code self_ec;
        const std::string exe = std::filesystem::read_symlink("/proc/self/exe", self_ec).string();
        AgentRanks ranks(state_dir_, socket, info_.address(), exe);
        while (!g_stop) {
            if (id().empty() && !register_once()) {
                if (refused_) break;
                sleep_for(std::chrono::seconds(1));
                continue;
            }
            poll(ranks, false);
            sleep_for(std::chrono::milliseconds(200));
        }
        drain(ranks);
        ranks.kill_all();
        if (!id().empty()) poll(ranks, true, /*leaving=*/true);  // goodbye, with the last exits
        (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
        return refused_ ? 1 : 0;
    }

  private:
    AgentIdentity identity() const {
        std::lock_guard<std::mutex> lock(mu_);
        return me_;
    }
    std::string id() const { return identity().id; }
    // Forgets the registration; its secret stays for the next one to present.
    void forget_id() {
        std::lock_guard<std::mutex> lock(mu_);
        me_.id.clear();
    }

    std::unique_ptr<grpc::ClientContext> context() const {
        auto ctx = std::make_unique<grpc::ClientContext>();
        ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
        return ctx;
    }

    // Shutting down: the supervisor has the jobs of this agent's ranks checkpoint and move; this
    // keeps polling (their exits go up) until they are gone or the drain time is over.
    void drain(AgentRanks& ranks) {
        if (id().empty() || ranks.idle()) return;
        std::fprintf(stderr, "deltatuned agent: draining (up to %lld s)\n",
                     static_cast<long long>(drain_.count()));
        const auto end = std::chrono::steady_clock::now() + drain_;
        while (!id().empty() && std::chrono::steady_clock::now() < end) {
            const bool done = ranks.idle();
            poll(ranks, true);  // after the last exit, once more to deliver it
            if (done) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }

    // Exits up, orders down. Terminations first: a relaunch after a fault may follow them.
    void poll(AgentRanks& ranks, bool draining, bool leaving = false) {
        v1::AgentPollRequest req;
        const AgentIdentity me = identity();
        req.set_agent_id(me.id);
        req.set_agent_secret(me.secret);
        req.set_draining(draining);
        req.set_leaving(leaving);
        std::vector<v1::RemoteRankExit> exits = ranks.take_exits();
        for (const v1::RemoteRankExit& e : exits) *req.add_exits() = e;
        v1::AgentPollResponse resp;
        auto ctx = context();
        const grpc::Status s = stub_->AgentPoll(ctx.get(), req, &resp);
        if (!s.ok()) {
            ranks.give_back(std::move(exits));
            return;
        }
        if (resp.register_again()) {
            // The supervisor restarted or forgot this agent: the attempts it ran are over.
            forget_id();
            ranks.kill_all();
            return;
        }
        for (const v1::TerminateOrder& t : resp.terminates()) ranks.terminate(t);
        for (const v1::LaunchOrder& l : resp.launches()) {
            // Ranks of a terminated attempt may still be exiting: the bound is per order.
            const int capacity = capacity_for(l);
            if (draining) {
                ranks.refuse(l, "the agent is shutting down");  // placed before it knew
            } else if (l.ranks_size() > capacity) {
                ranks.refuse(l, absl::StrCat("the order's ", l.ranks_size(),
                                             " ranks exceed this node's ", capacity));
            } else {
                ranks.launch(l);
            }
        }
    }

    // The ranks this node runs at once for the order's kind of job: one per GPU, or its CPU ranks.
    int capacity_for(const v1::LaunchOrder& l) const {
        v1::JobSpec spec;
        const bool gpu = spec.ParseFromString(l.spec()) && spec.resources().gpus() > 0;
        return gpu ? info_.gpus_size() : info_.cpu_ranks();
    }

    bool register_once() {
        v1::RegisterAgentRequest req;
        *req.mutable_info() = info_;
        req.set_previous_secret(identity().secret);  // replaces this agent's own live entry
        v1::RegisterAgentResponse resp;
        auto ctx = context();
        const grpc::Status s = stub_->RegisterAgent(ctx.get(), req, &resp);
        if (!s.ok()) {
            refused_ = s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                       s.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
            std::fprintf(stderr, "deltatuned agent: register: %s\n", s.error_message().c_str());
            return false;
        }
        {
            std::lock_guard<std::mutex> lock(mu_);
            me_ = {resp.agent_id(), resp.agent_secret()};
        }
        std::fprintf(stderr, "deltatuned agent: registered %s as %s (%d GPUs, %d CPU ranks)\n",
                     info_.hostname().c_str(), resp.agent_id().c_str(), info_.gpus_size(),
                     info_.cpu_ranks());
        return true;
    }

    template <typename D>
    static void sleep_for(D d) {  // in slices, so SIGTERM ends the wait
        const auto end = std::chrono::steady_clock::now() + d;
        while (!g_stop && std::chrono::steady_clock::now() < end) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }

    v1::AgentInfo info_;
    std::string token_;
    std::shared_ptr<grpc::Channel> channel_;
    std::unique_ptr<v1::AgentService::Stub> stub_;
    std::string state_dir_;
    std::chrono::seconds drain_;
    mutable std::mutex mu_;
    AgentIdentity me_;  // guarded by mu_: the relay reads it from gRPC threads
    bool refused_ = false;
    RankRelay relay_;
};

}  // namespace

int agent_main(int argc, char** argv) {
    CLI::App app{"", "deltatuned agent"};
    configure_command_line(app);
    AgentArgs args;
    declare_flags(app, args);
    if (const std::optional<int> status =
            parse_or_exit_status(app, std::vector<std::string>(argv + 2, argv + argc))) {
        return *status;
    }
    if (absl::Status s = check_agent_args(&args); !s.ok()) {
        std::fprintf(stderr, "deltatuned agent: %s\n", std::string(s.message()).c_str());
        return 2;
    }
    std::string token;
    if (!args.token_file.empty()) {
        auto tokens = read_token_file(args.token_file, "--token-file");
        if (!tokens.ok()) {
            std::fprintf(stderr, "deltatuned agent: %s\n",
                         std::string(tokens.status().message()).c_str());
            return 2;
        }
        token = tokens->front();
    }
    auto credentials = client_channel_credentials(args.ca_file, false);
    if (!credentials.ok()) {
        std::fprintf(stderr, "deltatuned agent: %s\n",
                     std::string(credentials.status().message()).c_str());
        return 2;
    }
    signal(SIGTERM, [](int) { g_stop = 1; });
    signal(SIGINT, [](int) { g_stop = 1; });
    return Agent(args, std::move(token), *std::move(credentials)).run();
}

}  // namespace deltatune::daemon
