// The admin HTTP port (listen.http): Prometheus `/metrics` (deltatune_* names),
// `/healthz` (the process serves), `/readyz` (the scheduler runs and the daemon is not shutting
// down), and read-only JSON of jobs for dashboards: `/v1/jobs` (query: page_size, page_token,
// state) and `/v1/jobs/{id}` in protobuf's JSON mapping. The JSON routes take the same bearer
// tokens as gRPC; probes and metrics are open (they carry no job specs).
#pragma once

#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/auth.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/service/grpc_metrics.h"
#include "daemon/service/http_server.h"
#include "deltatune/v1/agent.pb.h"

namespace deltatune::daemon {

// The registered node agents as ListAgents returns them (the supervisor's AgentRegistry::list):
// what the admin port shows of them, without this layer knowing the registry.
using AgentLister = std::function<std::vector<v1::Agent>()>;

// Counters derived from each job's durable event log, read incrementally at scrape time: a
// restarted daemon re-derives the same totals, and no job code has to call into metrics.
class MetricsCollector {
  public:
    // `gpus`: what the scheduler hands out; `grpc` (may be null): the public server's calls.
    MetricsCollector(JobManager* manager, int gpus, const GrpcServerMetrics* grpc,
                     AgentLister agents)
        : manager_(manager), gpus_(gpus), grpc_(grpc), agents_(std::move(agents)) {}
    // The exposition text. `subscribers` is the live event-stream count.
    // per_job: the series labelled by job (names, losses); false gives the daemon-wide ones.
    std::string render(size_t subscribers, bool per_job = true);

  private:
    struct JobCounters {
        int64_t last_sequence = 0;
        std::map<std::string, int64_t> restarts;  // by fault kind
        std::vector<double> checkpoint_seconds;
        double checkpoint_bytes = 0;
        double last_checkpoint_step = NAN, last_checkpoint_time = 0;  // wall seconds
    };
    void consume_events(const std::string& name, JobCounters& counters);
    void render_daemon(const std::vector<v1::Job>& jobs, std::string& out) const;
    void render_job_gauges(const std::vector<v1::Job>& jobs, std::string& out) const;
    void render_job_counters(std::string& out) const;

    JobManager* manager_;
    int gpus_ = 0;
    const GrpcServerMetrics* grpc_ = nullptr;
    AgentLister agents_;  // empty: no agents section
    std::mutex mu_;
    std::map<std::string, JobCounters> jobs_;
};

class AdminHttpServer {
  public:
    struct Options {
        std::string address;  // host:port; port 0 picks one
        Authenticator auth;
        std::function<size_t()> subscribers;      // live event streams
        int gpus = 0;                             // what the scheduler hands out
        const GrpcServerMetrics* grpc = nullptr;  // the public server's call counters
        AgentLister agents;                       // registered node agents (may be empty)
        // PEM files (both or neither): HTTPS with them, as the gRPC listener's `tls:`.
        std::string tls_cert_file, tls_key_file;
        int max_connections = 256, max_connections_per_client = 16;
    };
    // Binds and starts serving on a background thread.
    static absl::StatusOr<std::unique_ptr<AdminHttpServer>> start(JobManager* manager,
                                                                  Options options);
    ~AdminHttpServer();  // stops serving
    int port() const { return server_->port(); }
    void set_ready(bool ready) { ready_ = ready; }

  private:
    using Routes = std::vector<std::pair<std::string, HttpHandler>>;
    AdminHttpServer(JobManager* manager, Options options);
    void probe_routes(Routes& routes);
    void job_routes(Routes& routes);
    void ui_routes(Routes& routes);

    JobManager* manager_;
    Options options_;
    MetricsCollector metrics_;
    std::atomic<bool> ready_{false};
    std::unique_ptr<HttpServer> server_;  // last: stops (and finishes its requests) first
};

}  // namespace deltatune::daemon
