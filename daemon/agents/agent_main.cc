#include "daemon/agents/agent_main.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/agents/agent_ranks.h"
#include "daemon/agents/agent_state_dir.h"
#include "daemon/agents/rank_relay.h"
#include "daemon/auth.h"
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

const char kUsage[] =
    "usage: deltatuned agent --supervisor HOST:PORT [--token-file F] [--hostname H]\n"
    "       [--address A] [--cpu-ranks N] [--state-dir D] [--drain-seconds S] [--ca-file F]\n"
    "       [--plaintext-token allow]\n"
    "  registers this machine with a supervisor deltatuned, heartbeats, and runs the ranks it\n"
    "  is given (docs/multinode.md); rank logs and specs go under D, a folder of this user's\n"
    "  only (default /var/lib/deltatune-agent/<hostname> as root, else\n"
    "  ~/.local/state/deltatune/agent-<hostname>). On SIGTERM its jobs checkpoint and move to\n"
    "  other agents; after S seconds (default 90) ranks still running are killed.\n"
    "  TLS to the supervisor with --ca-file (its CA), $DELTATUNE_CA_FILE or $DELTATUNE_TLS=1;\n"
    "  the token goes in plaintext only to a loopback supervisor, or with --plaintext-token\n"
    "  allow (a network you trust).\n";

struct AgentArgs {
    std::string supervisor, token_file, hostname, address, state_dir, ca_file;
    int cpu_ranks = 0;
    int drain_seconds = 90;
    bool plaintext_token = false;  // the token may cross the network unencrypted
};

bool parse(int argc, char** argv, AgentArgs* a) {
    std::map<std::string, std::string> flags;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (std::strncmp(argv[i], "--", 2) != 0) return false;
        flags[argv[i] + 2] = argv[i + 1];
    }
    if (argc % 2 != 0) return false;
    for (const auto& [k, v] : flags) {
        if (k == "supervisor")
            a->supervisor = v;
        else if (k == "token-file")
            a->token_file = v;
        else if (k == "hostname")
            a->hostname = v;
        else if (k == "address")
            a->address = v;
        else if (k == "state-dir")
            a->state_dir = v;
        else if (k == "ca-file")
            a->ca_file = v;
        else if (k == "plaintext-token" && v == "allow")
            a->plaintext_token = true;
        else if (k == "drain-seconds" && absl::SimpleAtoi(v, &a->drain_seconds) &&
                 a->drain_seconds >= 0) {
        } else if (k == "cpu-ranks" && absl::SimpleAtoi(v, &a->cpu_ranks) && a->cpu_ranks >= 0) {
        } else {
            return false;
        }
    }
    return !a->supervisor.empty();
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
    if (argc == 3 && (std::strcmp(argv[2], "--help") == 0 || std::strcmp(argv[2], "-h") == 0)) {
        std::fputs(kUsage, stdout);  // asked for: stdout, success
        return 0;
    }
    AgentArgs args;
    if (!parse(argc, argv, &args)) {
        std::fputs(kUsage, stderr);
        return 2;
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
