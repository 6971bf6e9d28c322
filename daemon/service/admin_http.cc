#include "daemon/service/admin_http.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/config/daemon_config.h"
#include "daemon/service/metrics_history.h"
#include "daemon/service/metrics_text.h"
#include "daemon/service/ui_page.h"
#include "deltatune/v1/service.pb.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"

#ifndef DT_VERSION
#define DT_VERSION "dev"
#endif

namespace deltatune::daemon {
namespace {

constexpr double kCheckpointBuckets[] = {0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600};

// Every job, paging through the store.
std::vector<v1::Job> all_jobs(JobManager* manager) {
    std::vector<v1::Job> jobs;
    JobManager::ListRequest req;
    req.page_size = 1000;
    while (true) {
        auto page = manager->list_jobs(req);
        if (!page.ok()) break;
        for (auto& j : page->jobs) jobs.push_back(std::move(j));
        if (page->next_page_token.empty()) break;
        req.page_token = page->next_page_token;
    }
    return jobs;
}

int http_status(absl::StatusCode code) {
    switch (code) {
        case absl::StatusCode::kInvalidArgument:
            return 400;
        case absl::StatusCode::kUnauthenticated:
            return 401;
        case absl::StatusCode::kPermissionDenied:
            return 403;
        case absl::StatusCode::kNotFound:
            return 404;
        case absl::StatusCode::kFailedPrecondition:
            return 409;
        case absl::StatusCode::kResourceExhausted:
            return 429;
        case absl::StatusCode::kUnavailable:
            return 503;
        default:
            return 500;
    }
}

void reply_error(HttpResponse& res, const absl::Status& s) {
    res.status = http_status(s.code());
    const nlohmann::json body = {{"error",
                                  {{"code", res.status},
                                   {"status", absl::StatusCodeToString(s.code())},
                                   {"message", std::string(s.message())}}}};
    res.set_content(body.dump() + "\n", "application/json");
}

template <typename Message>
void reply_json(HttpResponse& res, const Message& m) {
    std::string out;
    google::protobuf::util::JsonPrintOptions opt;
    opt.preserve_proto_field_names = false;
    // Every field, zero and empty ones included: a poller reads `"jobs": []`, not `{}`.
    opt.always_print_primitive_fields = true;
    const auto s = google::protobuf::util::MessageToJsonString(m, &out, opt);
    if (!s.ok()) return reply_error(res, absl::InternalError(std::string(s.message())));
    res.set_content(out + "\n", "application/json");
}

}  // namespace

void MetricsCollector::consume_events(const std::string& name, JobCounters& c) {
    while (true) {
        auto events = manager_->events_after(name, c.last_sequence, 1000);
        if (!events.ok() || events->empty()) return;
        for (const v1::JobEvent& e : *events) {
            c.last_sequence = e.sequence();
            if (e.type() == "FAULT_DETECTED") {
                auto it = e.details().find("kind");
                ++c.restarts[it == e.details().end() ? "UNKNOWN" : it->second];
            } else if (e.type() == "CHECKPOINT_COMMITTED") {
                auto step = e.metrics().find("step");
                if (step != e.metrics().end()) c.last_checkpoint_step = step->second;
                c.last_checkpoint_time = double(e.time().seconds()) + e.time().nanos() * 1e-9;
                auto sec = e.metrics().find("seconds");
                if (sec != e.metrics().end()) c.checkpoint_seconds.push_back(sec->second);
                auto bytes = e.metrics().find("bytes");
                if (bytes != e.metrics().end()) c.checkpoint_bytes += bytes->second;
            }
        }
    }
}

namespace {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

double seconds_of(const google::protobuf::Timestamp& t) {
    return double(t.seconds()) + t.nanos() * 1e-9;
}

// A latest_metrics value of the job; NaN until reported (e.g. eval loss before an evaluation,
// MFU on CPU ranks).
double latest(const v1::Job& j, const char* key) {
    auto it = j.latest_metrics().find(key);
    return it == j.latest_metrics().end() ? NAN : it->second;
}

void help(std::string& out, const char* name, const char* type, const char* text) {
    absl::StrAppend(&out, "# HELP ", name, " ", text, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

// Build, jobs by state, the queue and the GPUs: no job names.
void MetricsCollector::render_daemon(const std::vector<v1::Job>& jobs, std::string& out) const {
    help(out, "deltatune_build_info", "gauge", "Build of this daemon.");
    absl::StrAppend(&out, "deltatune_build_info{version=\"", DT_VERSION, "\"} 1\n");
    help(out, "deltatune_jobs", "gauge", "Jobs by state.");
    std::map<std::string, int> by_state;
    // Every state a job can be in (not 0), so a dashboard shows each from the start.
    for (int s = v1::Job::State_MIN; s <= v1::Job::State_MAX; ++s) {
        if (v1::Job::State_IsValid(s) && s != v1::Job::STATE_UNSPECIFIED) {
            by_state[v1::Job::State_Name(static_cast<v1::Job::State>(s))] = 0;
        }
    }
    int gpus_held = 0;
    for (const auto& j : jobs) {
        ++by_state[v1::Job::State_Name(j.state())];
        if (holds_resources(j.state())) gpus_held += j.spec().resources().gpus();
    }
    for (const auto& [state, n] : by_state) {
        absl::StrAppend(&out, "deltatune_jobs{state=\"", state, "\"} ", n, "\n");
    }
    help(out, "deltatune_queue_length", "gauge", "Jobs waiting for a slot (QUEUED).");
    absl::StrAppend(&out, "deltatune_queue_length ", by_state["QUEUED"], "\n");
    help(out, "deltatune_gpus", "gauge", "GPUs this daemon schedules jobs onto.");
    absl::StrAppend(&out, "deltatune_gpus ", gpus_, "\n");
    help(out, "deltatune_gpus_free", "gauge", "GPUs no admitted job holds.");
    absl::StrAppend(&out, "deltatune_gpus_free ", std::max(0, gpus_ - gpus_held), "\n");
    if (agents_) {
        std::map<std::string, int> by_agent_state = {{"ALIVE", 0}, {"LOST", 0}};
        for (const v1::Agent& a : agents_()) ++by_agent_state[v1::Agent::State_Name(a.state())];
        help(out, "deltatune_agents", "gauge", "Registered node agents by state.");
        for (const auto& [state, n] : by_agent_state) {
            absl::StrAppend(&out, "deltatune_agents{state=\"", state, "\"} ", n, "\n");
        }
    }
}

// One gauge per job from its row: progress, the last step's metrics, the device.
void MetricsCollector::render_job_gauges(const std::vector<v1::Job>& jobs, std::string& out) const {
    struct Gauge {
        const char* name;
        const char* type;
        const char* help;
        std::function<double(const v1::Job&)> value;
    };
    auto key = [](const char* k) { return [k](const v1::Job& j) { return latest(j, k); }; };
    const Gauge gauges[] = {
        {"deltatune_job_step", "gauge", "Last completed optimizer step.",
         [](const v1::Job& j) { return double(j.progress().step()); }},
        {"deltatune_job_last_step_timestamp_seconds", "gauge", "Wall time of the last step.",
         // NaN until the first step: "time since the last step" must not read 56 years.
         [](const v1::Job& j) {
             return j.progress().has_last_step_time() ? seconds_of(j.progress().last_step_time())
                                                      : NAN;
         }},
        {"deltatune_job_tokens_total", "counter", "Real (non-padding) tokens trained.",
         [](const v1::Job& j) { return double(j.progress().tokens()); }},
        {"deltatune_job_tokens_per_second", "gauge",
         "Real tokens per second over the last 20 steps; 0 unless RUNNING.",
         [](const v1::Job& j) {
             return j.state() == v1::Job::RUNNING ? j.progress().tokens_per_second() : 0.0;
         }},
        {"deltatune_job_loss", "gauge", "Training loss of the last step.", key("loss")},
        {"deltatune_job_eval_loss", "gauge", "Loss on the eval files at the last evaluation.",
         key("eval_loss")},
        {"deltatune_job_learning_rate", "gauge", "Learning rate of the last step.", key("lr")},
        {"deltatune_job_grad_norm", "gauge",
         "Global gradient norm of the last step (before clipping).", key("grad_norm")},
        {"deltatune_job_step_seconds", "gauge", "Wall time of the last step.", key("step_seconds")},
        {"deltatune_job_mfu", "gauge",
         "Model FLOPs utilisation of the last step (GPU jobs; dense bf16 peak; recomputation "
         "not counted).",
         key("mfu")},
        {"deltatune_job_gpu_memory_bytes", "gauge",
         "Most GPU memory rank 0 has held (its allocator's peak).", key("gpu_memory_peak_bytes")},
        {"deltatune_job_gpu_memory_planned_bytes", "gauge",
         "GPU memory per rank the memory planner predicted.", key("gpu_memory_planned_bytes")},
        {"deltatune_job_total_steps", "gauge",
         "Optimizer steps the job runs (max_steps, or from num_epochs once the data is loaded).",
         [](const v1::Job& j) { return double(j.progress().total_steps()); }},
        {"deltatune_job_eta_seconds", "gauge",
         "Estimated seconds to the last step; 0 unless RUNNING.",
         [](const v1::Job& j) {
             if (j.state() != v1::Job::RUNNING) return 0.0;
             return std::max(0.0, seconds_of(j.progress().estimated_end_time()) - now_seconds());
         }},
    };
    for (const Gauge& g : gauges) {
        help(out, g.name, g.type, g.help);
        for (const auto& j : jobs) {
            absl::StrAppend(&out, g.name, "{job_id=\"", metric_label(j.name()), "\"} ",
                            metric_number(g.value(j)), "\n");
        }
    }
}

// What the event logs add up to: restarts, checkpoints.
void MetricsCollector::render_job_counters(std::string& out) const {
    help(out, "deltatune_job_restarts_total", "counter", "Faults that restarted a job, by kind.");
    for (const auto& [name, c] : jobs_) {
        for (const auto& [reason, n] : c.restarts) {
            absl::StrAppend(&out, "deltatune_job_restarts_total{job_id=\"", metric_label(name),
                            "\",reason=\"", metric_label(reason), "\"} ", n, "\n");
        }
    }
    help(out, "deltatune_job_last_checkpoint_step", "gauge",
         "Step of the job's newest committed checkpoint (NaN: none yet).");
    for (const auto& [name, c] : jobs_) {
        absl::StrAppend(&out, "deltatune_job_last_checkpoint_step{job_id=\"", metric_label(name),
                        "\"} ", metric_number(c.last_checkpoint_step), "\n");
    }
    help(out, "deltatune_job_last_checkpoint_age_seconds", "gauge",
         "Seconds since the job's newest checkpoint was committed (NaN: none yet).");
    const double now = now_seconds();
    for (const auto& [name, c] : jobs_) {
        absl::StrAppend(
            &out, "deltatune_job_last_checkpoint_age_seconds{job_id=\"", metric_label(name), "\"} ",
            metric_number(c.last_checkpoint_time > 0 ? now - c.last_checkpoint_time : NAN), "\n");
    }
    help(out, "deltatune_checkpoint_bytes_total", "counter", "Bytes of committed checkpoints.");
    for (const auto& [name, c] : jobs_) {
        absl::StrAppend(&out, "deltatune_checkpoint_bytes_total{job_id=\"", metric_label(name),
                        "\"} ", metric_number(c.checkpoint_bytes), "\n");
    }
    help(out, "deltatune_checkpoint_duration_seconds", "histogram", "Checkpoint write time.");
    for (const auto& [name, c] : jobs_) {
        const std::string j = metric_label(name);
        double sum = 0;
        for (double s : c.checkpoint_seconds) sum += s;
        for (double le : kCheckpointBuckets) {
            int64_t n = 0;
            for (double s : c.checkpoint_seconds) n += s <= le;
            absl::StrAppend(&out, "deltatune_checkpoint_duration_seconds_bucket{job_id=\"", j,
                            "\",le=\"", metric_number(le), "\"} ", n, "\n");
        }
        absl::StrAppend(&out, "deltatune_checkpoint_duration_seconds_bucket{job_id=\"", j,
                        "\",le=\"+Inf\"} ", c.checkpoint_seconds.size(), "\n",
                        "deltatune_checkpoint_duration_seconds_sum{job_id=\"", j, "\"} ",
                        metric_number(sum), "\n",
                        "deltatune_checkpoint_duration_seconds_count{job_id=\"", j, "\"} ",
                        c.checkpoint_seconds.size(), "\n");
    }
}

std::string MetricsCollector::render(size_t subscribers, bool per_job) {
    const std::vector<v1::Job> jobs = all_jobs(manager_);
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    render_daemon(jobs, out);
    // A deleted job's counters leave with it (its series would otherwise stay until a restart).
    std::set<std::string> live;
    for (const auto& j : jobs) live.insert(j.name());
    std::erase_if(jobs_, [&](const auto& entry) { return !live.count(entry.first); });
    if (per_job) {
        for (const auto& j : jobs) consume_events(j.name(), jobs_[j.name()]);
        render_job_gauges(jobs, out);
        render_job_counters(out);
    }
    help(out, "deltatune_event_stream_subscribers", "gauge",
         "Live StreamJobEvents/WatchJob streams.");
    absl::StrAppend(&out, "deltatune_event_stream_subscribers ", subscribers, "\n");
    if (grpc_ != nullptr) out += grpc_->render();
    out += process_metrics();
    return out;
}

AdminHttpServer::AdminHttpServer(JobManager* manager, Options options)
    : manager_(manager),
      options_(std::move(options)),
      metrics_(manager, options_.gpus, options_.grpc, options_.agents) {}

AdminHttpServer::~AdminHttpServer() = default;

absl::StatusOr<std::unique_ptr<AdminHttpServer>> AdminHttpServer::start(JobManager* manager,
                                                                        Options options) {
    std::unique_ptr<AdminHttpServer> s(new AdminHttpServer(manager, std::move(options)));
    HttpServer::Options http;
    http.address = s->options_.address;
    http.tls_cert_file = s->options_.tls_cert_file;
    http.tls_key_file = s->options_.tls_key_file;
    http.limits.max_connections = s->options_.max_connections;
    http.limits.max_connections_per_client = s->options_.max_connections_per_client;
    // Every answer is what its Content-Type says: browsers must not guess another.
    http.default_headers = {{"X-Content-Type-Options", "nosniff"}};
    Routes routes;
    s->probe_routes(routes);
    s->job_routes(routes);
    s->ui_routes(routes);
    DT_ASSIGN_OR_RETURN(s->server_, HttpServer::start(std::move(http), std::move(routes)));
    return s;
}

// Probes and metrics: open (no job specs), per-job series only with the token.
void AdminHttpServer::probe_routes(Routes& routes) {
    routes.emplace_back("/healthz", [](const HttpRequest&, HttpResponse& res) {
        res.set_content("ok\n", "text/plain");
    });
    routes.emplace_back("/readyz", [this](const HttpRequest&, HttpResponse& res) {
        res.status = ready_ ? 200 : 503;
        res.set_content(ready_ ? "ready\n" : "not ready\n", "text/plain");
    });
    // With auth on, /metrics without a valid token shows the daemon-wide series only (build,
    // jobs by state, stream subscribers): no job names or losses. Scrapers that send the token
    // get every series.
    routes.emplace_back("/metrics", [this](const HttpRequest& req, HttpResponse& res) {
        const size_t subscribers = options_.subscribers ? options_.subscribers() : 0;
        const bool per_job = options_.auth.check_header(req.header("Authorization")).ok();
        res.set_content(metrics_.render(subscribers, per_job), "text/plain; version=0.0.4");
    });
}

// The read-only JSON of jobs, behind the bearer token.
void AdminHttpServer::job_routes(Routes& routes) {
    auto authorized = [this](const HttpRequest& req, HttpResponse& res) {
        const absl::Status s = options_.auth.check_header(req.header("Authorization"));
        if (!s.ok()) reply_error(res, s);
        return s.ok();
    };
    routes.emplace_back("/v1/jobs", [this, authorized](const HttpRequest& req, HttpResponse& res) {
        if (!authorized(req, res)) return;
        JobManager::ListRequest list;
        if (req.has_param("page_size") &&
            !absl::SimpleAtoi(req.param("page_size"), &list.page_size)) {
            return reply_error(res, absl::InvalidArgumentError("page_size must be an integer"));
        }
        list.page_token = req.param("page_token");
        // ?label=key:value (or key%3Dvalue), repeatable: every one must match (as ListJobs'
        // label filter). A bare '=' would end the parameter's value.
        for (const std::string& kv : req.param_values("label")) {
            const size_t eq = kv.find_first_of(":=");
            if (eq == std::string::npos || eq == 0) {
                return reply_error(res, absl::InvalidArgumentError(
                                            absl::StrCat("label '", kv, "' is not key:value")));
            }
            list.labels[kv.substr(0, eq)] = kv.substr(eq + 1);
        }
        // ?state= in any case, as the CLI's --state.
        if (req.has_param("state") &&
            !v1::Job::State_Parse(absl::AsciiStrToUpper(req.param("state")), &list.state)) {
            return reply_error(res, absl::InvalidArgumentError(
                                        absl::StrCat("unknown state '", req.param("state"), "'")));
        }
        auto page = manager_->list_jobs(list);
        if (!page.ok()) return reply_error(res, page.status());
        v1::ListJobsResponse out;
        for (auto& j : page->jobs) *out.add_jobs() = std::move(j);
        out.set_next_page_token(page->next_page_token);
        reply_json(res, out);
    });
    // ?since_step=N: the steps after N only (a poller's next request passes its last step).
    routes.emplace_back(R"(/v1/jobs/([A-Za-z0-9._-]+)/metrics)", [this, authorized](
                                                                     const HttpRequest& req,
                                                                     HttpResponse& res) {
        if (!authorized(req, res)) return;
        int64_t since = 0;
        if (req.has_param("since_step") && !absl::SimpleAtoi(req.param("since_step"), &since)) {
            return reply_error(res, absl::InvalidArgumentError("since_step must be an integer"));
        }
        auto body = metrics_history_json(*manager_, req.matches[1], since);
        if (!body.ok()) return reply_error(res, body.status());
        res.set_content(*body, "application/json");
    });
    // The node agents (docs/multinode.md) and their state, as ListAgents returns them.
    routes.emplace_back("/v1/agents",
                        [this, authorized](const HttpRequest& req, HttpResponse& res) {
                            if (!authorized(req, res)) return;
                            v1::ListAgentsResponse out;
                            if (options_.agents) {
                                for (v1::Agent& a : options_.agents())
                                    *out.add_agents() = std::move(a);
                            }
                            reply_json(res, out);
                        });
    // ?min_sequence=N&page_size=M&type=T: the job's event log a page at a time (ListJobEvents).
    routes.emplace_back(
        R"(/v1/jobs/([A-Za-z0-9._-]+)/events)",
        [this, authorized](const HttpRequest& req, HttpResponse& res) {
            if (!authorized(req, res)) return;
            JobManager::EventsRequest r;
            r.name = req.matches[1];
            r.page_token = req.param("page_token");
            r.type = req.param("type");
            if ((req.has_param("min_sequence") &&
                 !absl::SimpleAtoi(req.param("min_sequence"), &r.min_sequence)) ||
                (req.has_param("page_size") &&
                 !absl::SimpleAtoi(req.param("page_size"), &r.page_size))) {
                return reply_error(
                    res, absl::InvalidArgumentError("min_sequence and page_size are integers"));
            }
            auto page = manager_->list_events(r);
            if (!page.ok()) return reply_error(res, page.status());
            v1::ListJobEventsResponse out;
            for (auto& e : page->events) *out.add_events() = std::move(e);
            out.set_next_page_token(page->next_page_token);
            reply_json(res, out);
        });
    routes.emplace_back(R"(/v1/jobs/([A-Za-z0-9._-]+))",
                        [this, authorized](const HttpRequest& req, HttpResponse& res) {
                            if (!authorized(req, res)) return;
                            auto job = manager_->get_job(req.matches[1]);
                            if (!job.ok()) return reply_error(res, job.status());
                            reply_json(res, *job);
                        });
}

void AdminHttpServer::ui_routes(Routes& routes) {
    // The dashboard page: static (it holds no data; its script fetches the JSON routes
    // with the bearer token the user enters), so it is served without one.
    auto page = [csp = ui_content_security_policy(ui_page_html())](const HttpRequest&,
                                                                   HttpResponse& res) {
        res.set_header("Cache-Control", "no-store");
        res.set_header("Content-Security-Policy", csp);
        res.set_header("X-Frame-Options", "DENY");  // frame-ancestors for older browsers
        res.set_content(std::string(ui_page_html()), "text/html; charset=utf-8");
    };
    routes.emplace_back("/ui", page);
    routes.emplace_back(R"(/ui/jobs/([A-Za-z0-9._-]+))", page);
}

}  // namespace deltatune::daemon
