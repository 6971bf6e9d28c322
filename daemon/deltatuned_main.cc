// deltatuned: the supervisor (wiring only). `deltatuned --config F [--listen ADDR]` serves the
// public gRPC API (FineTuningService, grpc.health.v1, reflection) and the rank socket;
// `deltatuned rank ...` is a rank process, dispatched to deltatune::rank_main(argc, argv) with
// the full argv (argv[1] == "rank"). SIGTERM/SIGINT: stop admitting, ask ranks to checkpoint and
// exit, wait up to shutdown_grace_seconds, leave jobs QUEUED/PAUSED for the next start, then stop
// serving.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "daemon/agents/agent_main.h"
#include "daemon/agents/agent_registry.h"
#include "daemon/agents/agent_service.h"
#include "daemon/auth.h"
#include "daemon/command_line.h"
#include "daemon/config/daemon_config.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/rank/rank_main.h"
#include "daemon/rank/rank_socket.h"
#include "daemon/service/admin_http.h"
#include "daemon/service/fine_tuning_service.h"
#include "daemon/service/grpc_metrics.h"
#include "daemon/service/rank_service.h"

namespace {

using deltatune::daemon::AdminHttpServer;
using deltatune::daemon::AgentRegistry;
using deltatune::daemon::AgentServiceImpl;
using deltatune::daemon::Authenticator;
using deltatune::daemon::DaemonConfig;
using deltatune::daemon::FineTuningService;
using deltatune::daemon::GrpcServerMetrics;
using deltatune::daemon::job_manager_options;
using deltatune::daemon::JobManager;
using deltatune::daemon::JobManagerOptions;
using deltatune::daemon::load_daemon_config;
using deltatune::daemon::RankServiceImpl;
using deltatune::daemon::start_public_server;
using deltatune::daemon::start_rank_server;
using deltatune::daemon::validate_daemon_config;

#ifndef DT_VERSION
#define DT_VERSION "unknown"
#endif

int fail(const absl::Status& s) {
    std::fprintf(stderr, "deltatuned: %s\n", std::string(s.message()).c_str());
    return 1;
}

// Blocks SIGTERM/SIGINT in every thread (those started later inherit the mask) so the main
// thread can take them synchronously with sigwait; ranks get default dispositions back at spawn.
sigset_t block_shutdown_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal(SIGPIPE, SIG_IGN);
    return set;
}

int serve(const std::string& config_path, const std::string& listen) {
    const sigset_t signals = block_shutdown_signals();
    absl::StatusOr<DaemonConfig> config = load_daemon_config(config_path);
    if (!config.ok()) return fail(config.status());
    if (!listen.empty()) {
        config->grpc_address = listen;
        if (absl::Status s = validate_daemon_config(*config); !s.ok()) return fail(s);
    }
    absl::StatusOr<Authenticator> auth = Authenticator::from_token_file(config->auth_token_file);
    if (!auth.ok()) return fail(auth.status());
    // Node agents (docs/multinode.md) beat a third of the rank heartbeat timeout apart and are
    // LOST after the whole of it. The registry outlives the manager, whose scheduler places
    // ranks on it.
    const auto beat_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(config->heartbeat_timeout_seconds * 1000));
    AgentRegistry agents(beat_timeout / 3, beat_timeout);
    const JobManagerOptions options = job_manager_options(*config);
    absl::StatusOr<std::unique_ptr<JobManager>> manager = JobManager::open(options);
    if (!manager.ok()) return fail(manager.status());
    RankServiceImpl rank_service(manager->get());
    auto rank_server = start_rank_server(&rank_service, config->state_dir + "/rank.sock");
    if (!rank_server.ok()) return fail(rank_server.status());
    (*manager)->set_remote_ranks(&agents);
    (*manager)->start();
    const Authenticator http_auth = *auth;
    auto service = std::make_unique<FineTuningService>(manager->get(), std::move(*auth));
    GrpcServerMetrics grpc_metrics;  // outlives the server (declared before it)
    AgentServiceImpl agent_service(&agents, manager->get(), http_auth);
    auto server =
        start_public_server(service.get(), *config, nullptr, &grpc_metrics, {&agent_service});
    if (!server.ok()) return fail(server.status());
    absl::StatusOr<std::unique_ptr<AdminHttpServer>> admin;
    if (!config->http_address.empty()) {
        FineTuningService* svc = service.get();
        AdminHttpServer::Options admin_options;
        admin_options.address = config->http_address;
        admin_options.auth = http_auth;
        admin_options.subscribers = [svc] { return svc->stream_subscribers(); };
        admin_options.gpus = options.gpus;
        admin_options.grpc = &grpc_metrics;
        admin_options.agents = [&agents] { return agents.list(); };
        admin_options.tls_cert_file = config->tls_cert_file;
        admin_options.tls_key_file = config->tls_key_file;
        admin_options.max_connections = config->limits.http_connections;
        admin_options.max_connections_per_client = config->limits.http_connections_per_client;
        admin = AdminHttpServer::start(manager->get(), std::move(admin_options));
        if (!admin.ok()) return fail(admin.status());
        (*admin)->set_ready(true);
    }
    std::fprintf(stderr, "deltatuned: serving on %s, admin http %s (state %s)\n",
                 config->grpc_address.c_str(),
                 config->http_address.empty() ? "off" : config->http_address.c_str(),
                 config->state_dir.c_str());

    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "deltatuned: %s: checkpointing running jobs (up to %.0f s)\n",
                 strsignal(sig), config->shutdown_grace_seconds);
    (*server)->GetHealthCheckService()->SetServingStatus(false);
    if (admin.ok() && *admin) (*admin)->set_ready(false);
    const auto grace =
        std::chrono::milliseconds(static_cast<int64_t>(config->shutdown_grace_seconds * 1000));
    (*manager)->shutdown(grace);
    (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    (*rank_server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (admin.ok()) admin->reset();
    server->reset();
    service.reset();
    rank_server->reset();
    std::fprintf(stderr, "deltatuned: stopped\n");
    return 0;
}

struct DaemonFlags {
    std::string config, listen;
    bool check = false, version = false;
};

// The supervisor's command line; `deltatuned agent|rank ...` are modes of their own (their
// --help).
void declare_flags(CLI::App& app, DaemonFlags& f) {
    app.description(
        "the deltatune supervisor: the public gRPC API (FineTuningService, grpc.health.v1,\n"
        "reflection), the admin HTTP listener, the rank socket and the scheduler");
    app.add_option("--config", f.config, "the daemon's config (configs/daemon.yaml)")
        ->required()
        ->type_name("FILE");
    app.add_option("--listen", f.listen, "serve gRPC here instead of the config's listen.grpc")
        ->type_name("HOST:PORT");
    app.add_flag("--check", f.check, "validate the config, print it resolved, and exit");
    app.add_flag("-V,--version", f.version, "print the version and exit");
    app.footer(
        "modes:\n"
        "  deltatuned agent --supervisor HOST:PORT ...  a node agent (deltatuned agent --help)\n"
        "  deltatuned rank ...  one rank of a job; deltatuned and its agents start these\n");
}

bool asks_for_version(const std::vector<std::string>& args) {
    return std::find_if(args.begin(), args.end(), [](const std::string& a) {
               return a == "--version" || a == "-V";
           }) != args.end();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::strcmp(argv[1], "rank") == 0) return deltatune::rank_main(argc, argv);
    if (argc >= 2 && std::strcmp(argv[1], "agent") == 0) {
        return deltatune::daemon::agent_main(argc, argv);
    }
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (asks_for_version(args)) {  // before --config is required
        std::printf("deltatuned %s\n", DT_VERSION);
        return 0;
    }
    CLI::App app{"", "deltatuned"};
    deltatune::daemon::configure_command_line(app);
    DaemonFlags flags;
    declare_flags(app, flags);
    if (const std::optional<int> status = deltatune::daemon::parse_or_exit_status(app, args)) {
        return *status;
    }
    if (flags.check) {
        absl::StatusOr<DaemonConfig> c = load_daemon_config(flags.config);
        if (!c.ok()) return fail(c.status());
        std::printf("%s: ok (grpc %s, http %s, state %s)\n", flags.config.c_str(),
                    c->grpc_address.c_str(), c->http_address.c_str(), c->state_dir.c_str());
        return 0;
    }
    return serve(flags.config, flags.listen);
}
