// deltatune submit|get|list|watch|cancel|pause|resume|events|delete: the job commands (the ones
// on what a job leaves behind are in job_files_commands.cc).
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "daemon/cli/progress_line.h"
#include "daemon/config/job_spec_yaml.h"
#include "daemon/config/job_yaml.h"
#include "runtime/base/status_macros.h"

namespace deltatune::cli {

namespace {

int64_t now_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The terminal's width (80 when it cannot say), so the live line never wraps.
int terminal_width() {
    winsize w{};
    return ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? w.ws_col : 80;
}

// A live line on a terminal (redrawn in place, then a summary line); otherwise a line per update
// that changes it (`last_line`: the one printed before), so a log holds no repeats of updates it
// does not show (a checkpoint written, a rate refreshed).
void print_progress(const v1::Job& job, bool tty, TokenRate& rate, std::string& last_line) {
    const int64_t now = now_seconds();
    rate.add(static_cast<double>(now), job.progress().tokens());
    if (!tty) {
        std::string line = job_line(job);
        if (line == last_line) return;
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        last_line = std::move(line);
        return;
    }
    const double tok_s =
        rate.per_second() > 0 ? rate.per_second() : job.progress().tokens_per_second();
    std::fprintf(stderr, "\r%s\x1b[K",
                 progress_line(job, tok_s, now, terminal_width() - 1).c_str());
    if (is_terminal(job.state())) std::fprintf(stderr, "\n%s\n", job_summary(job).c_str());
}

// What a watcher is told once, above the progress: what the ranks made of the data (documents
// cut to fit a batch among it), and that a paused job waits for `resume` (the watch goes on until
// the job ends).
void say_once(const v1::Job& job, bool tty, bool& data_said, v1::Job::State& said_state) {
    FILE* out = tty ? stderr : stdout;
    const char* clear = tty ? "\r\x1b[K" : "";
    // Once complete: the steps per epoch come a moment after the documents.
    const bool planned = job.data_summary().steps_per_epoch() > 0 || is_terminal(job.state());
    const std::string data = data_said || !planned ? "" : data_line(job);
    if (!data.empty()) {
        std::fprintf(out, "%s%s\n", clear, data.c_str());
        data_said = true;
    }
    if (job.state() == v1::Job::PAUSED && said_state != v1::Job::PAUSED) {
        std::fprintf(out,
                     "%s%s is paused: `deltatune resume %s` continues it; watching until it ends\n",
                     clear, job.name().c_str(), job.name().c_str());
    }
    said_state = job.state();
    std::fflush(out);
}

// Streams the job until it ends; exit 0 only if it SUCCEEDED.
int watch(JobClient& client, const std::string& name) {
    auto ctx = client.context(/*streaming=*/true);
    v1::WatchJobRequest req;
    req.set_name(name);
    auto reader = client.stub().WatchJob(ctx.get(), req);
    v1::Job job;
    const bool tty = isatty(STDERR_FILENO) && !client.json();
    TokenRate rate;
    std::string last_line;
    bool data_said = false;
    v1::Job::State said_state = v1::Job::STATE_UNSPECIFIED;
    while (reader->Read(&job)) {
        if (!client.json()) {
            say_once(job, tty, data_said, said_state);
            print_progress(job, tty, rate, last_line);
        }
        if (is_terminal(job.state())) break;
    }
    const bool ended = !job.name().empty() && is_terminal(job.state());
    if (ended) ctx->TryCancel();  // done reading: the server's stream may still be open
    const grpc::Status finished = reader->Finish();
    if (!ended) {  // the stream stopped first: the server says why (NOT_FOUND for no such job)
        return report_rpc_error(finished.ok()
                                    ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                   "the watch stream ended before the job did")
                                    : finished);
    }
    if (client.json()) std::printf("%s\n", to_json(job).c_str());
    return job.state() == v1::Job::SUCCEEDED ? kExitOk : kExitJobFailed;
}

struct SubmitFlags {
    ClientFlags client;
    std::string path, request_id;
    bool watch = false, validate_only = false;
};

int submit(const SubmitFlags& flags) {
    const std::string& path = flags.path;
    std::ifstream in(path);
    if (!in) return fail("submit", absl::NotFoundError(path + ": cannot open"));
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = daemon::parse_job_yaml(text.str(), daemon::InputLimits{});
    if (!parsed.ok())
        return fail("submit", absl::InvalidArgumentError(
                                  absl::StrCat(path, ": ", parsed.status().message())));
    auto client = JobClient::connect(flags.client);
    if (!client.ok()) return fail("submit", client.status());
    v1::CreateJobRequest req;
    *req.mutable_spec() = parsed->spec;
    req.set_request_id(flags.request_id);
    req.set_validate_only(flags.validate_only);
    v1::Job job;
    auto ctx = client->context();
    const grpc::Status s = client->stub().CreateJob(ctx.get(), req, &job);
    if (!s.ok()) return report_rpc_error(s);
    if (req.validate_only()) {  // nothing created: say what was checked
        if (client->json()) {
            std::printf("%s\n", to_json(job).c_str());
        } else {
            std::printf(
                "valid: %s (the spec, its paths and data files, admission); not submitted\n",
                path.c_str());
        }
        return 0;
    }
    if (flags.watch) {
        if (!client->json()) std::fprintf(stderr, "submitted %s\n", job.name().c_str());
        return watch(*client, job.name());
    }
    std::printf("%s\n", client->json() ? to_json(job).c_str() : job.name().c_str());
    return 0;
}

// delete: a finished job and its events leave the daemon's store (its output folder stays).
int remove(const OneJobFlags& flags) {
    auto job = one_job(flags);
    if (!job.ok()) return fail("delete", job.status());
    v1::DeleteJobRequest r;
    r.set_name(job->name);
    google::protobuf::Empty empty;
    auto ctx = job->client.context();
    const grpc::Status s = job->client.stub().DeleteJob(ctx.get(), r, &empty);
    if (!s.ok()) return report_rpc_error(s);
    if (job->client.json()) {
        std::printf("{\"deleted\": \"%s\"}\n", r.name().c_str());
    } else {  // the folder keeps its marker: say how a new job continues there
        std::printf(
            "deleted %s; its output folder stays: a job with `resume_from: %s` and the same "
            "output_dir continues its run there\n",
            r.name().c_str(), r.name().c_str());
    }
    return 0;
}

// get, cancel, pause, resume: one job name in, one Job out (get --output yaml: its job file).
int single(const std::string& command, const OneJobFlags& flags) {
    auto one = one_job(flags, /*yaml_ok=*/command == "get");
    if (!one.ok()) return fail(command, one.status());
    JobClient& client = one->client;
    const std::string& name = one->name;
    if (command == "watch") return watch(client, name);
    auto ctx = client.context();
    v1::Job job;
    grpc::Status s;
    if (command == "get") {
        v1::GetJobRequest r;
        r.set_name(name);
        s = client.stub().GetJob(ctx.get(), r, &job);
    } else if (command == "cancel") {
        v1::CancelJobRequest r;
        r.set_name(name);
        s = client.stub().CancelJob(ctx.get(), r, &job);
    } else if (command == "pause") {
        v1::PauseJobRequest r;
        r.set_name(name);
        s = client.stub().PauseJob(ctx.get(), r, &job);
    } else {
        v1::ResumeJobRequest r;
        r.set_name(name);
        s = client.stub().ResumeJob(ctx.get(), r, &job);
    }
    if (!s.ok()) return report_rpc_error(s);
    if (client.yaml()) {
        std::printf("%s", daemon::job_spec_to_yaml(job.spec()).c_str());
        return 0;
    }
    std::printf("%s\n", client.json() ? to_json(job).c_str() : job_line(job).c_str());
    const std::string data = command == "get" && !client.json() ? data_line(job) : "";
    if (!data.empty()) std::printf("  %s\n", data.c_str());
    return 0;
}

struct ListFlags {
    ClientFlags client;
    std::string state, page_token;
    uint64_t page_size = 0;
    std::vector<std::string> labels;
};

int list(const ListFlags& flags) {
    auto client = JobClient::connect(flags.client);
    if (!client.ok()) return fail("list", client.status());
    v1::ListJobsRequest req;
    if (!flags.state.empty()) {
        v1::Job::State st;  // any case: --state running
        if (!v1::Job::State_Parse(absl::AsciiStrToUpper(flags.state), &st)) {
            return fail("list",
                        absl::InvalidArgumentError("--state: unknown state '" + flags.state + "'"));
        }
        req.set_state(st);
    }
    req.set_page_size(static_cast<int32_t>(std::min<uint64_t>(flags.page_size, INT32_MAX)));
    req.set_page_token(flags.page_token);
    for (const std::string& kv : flags.labels) {  // repeated: every one must match
        const size_t eq = kv.find('=');
        if (eq == std::string::npos) {
            return fail("list", absl::InvalidArgumentError("--label: expected key=value, got '" +
                                                           kv + "'"));
        }
        (*req.mutable_labels())[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    v1::ListJobsResponse resp;
    auto ctx = client->context();
    const grpc::Status s = client->stub().ListJobs(ctx.get(), req, &resp);
    if (!s.ok()) return report_rpc_error(s);
    if (client->json()) {
        std::printf("%s\n", to_json(resp).c_str());
        return 0;
    }
    for (const auto& j : resp.jobs()) std::printf("%s\n", job_line(j).c_str());
    if (!resp.next_page_token().empty())
        std::printf("next page: --page-token %s\n", resp.next_page_token().c_str());
    return 0;
}

// Every event after `since` that exists now, page by page, then return.
int print_events(JobClient& client, const std::string& name, int64_t since) {
    v1::ListJobEventsRequest req;
    req.set_name(name);
    req.set_min_sequence(since + 1);
    req.set_page_size(1000);
    for (;;) {
        v1::ListJobEventsResponse resp;
        auto ctx = client.context();
        const grpc::Status s = client.stub().ListJobEvents(ctx.get(), req, &resp);
        if (!s.ok()) return report_rpc_error(s);
        for (const v1::JobEvent& e : resp.events()) {
            std::printf("%s\n", client.json() ? to_json(e).c_str() : event_line(e).c_str());
        }
        if (resp.next_page_token().empty()) return kExitOk;
        req.set_page_token(resp.next_page_token());
    }
}

struct EventsFlags {
    OneJobFlags job;
    uint64_t since = 0;
    bool follow = false;
};

int events(const EventsFlags& flags) {
    auto one = one_job(flags.job);
    if (!one.ok()) return fail("events", one.status());
    JobClient* client = &one->client;
    const std::string& name = one->name;
    // Without --follow: what exists now, at once (the stream would wait for its first heartbeat).
    if (!flags.follow) return print_events(*client, name, static_cast<int64_t>(flags.since));
    auto ctx = client->context(/*streaming=*/true);
    v1::StreamJobEventsRequest req;
    req.set_name(name);
    req.set_since_sequence(static_cast<int64_t>(flags.since));
    auto reader = client->stub().StreamJobEvents(ctx.get(), req);
    v1::JobEvent e;
    bool ended = false;
    while (!ended && reader->Read(&e)) {
        if (e.type() == "HEARTBEAT") continue;
        std::printf("%s\n", client->json() ? to_json(e).c_str() : event_line(e).c_str());
        std::fflush(stdout);
        ended = e.type() == "SUCCEEDED" || e.type() == "FAILED" || e.type() == "CANCELLED";
    }
    // Cancelled only when this side stopped reading: a stream the server ended carries its
    // reason (NOT_FOUND for no such job), which a cancel would turn into CANCELLED.
    if (ended) ctx->TryCancel();
    const grpc::Status s = reader->Finish();
    if (ended) return 0;
    return report_rpc_error(s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                  "the event stream ended before the job did")
                                   : s);
}

}  // namespace

CommandRun submit_command(CLI::App& app) {
    auto f = std::make_shared<SubmitFlags>();
    app.add_option("JOB.yaml", f->path, "the job file")->required();
    app.add_flag("--watch", f->watch, "follow the job until it ends (exit 7 unless it succeeds)");
    app.add_flag("--validate-only", f->validate_only,
                 "check the spec, its paths and data files and admission; create nothing");
    app.add_option("--request-id", f->request_id,
                   "an id of the caller's: the same id again returns the job it created")
        ->type_name("ID");
    add_client_flags(app, f->client);
    return [f] { return submit(*f); };
}

CommandRun list_command(CLI::App& app) {
    auto f = std::make_shared<ListFlags>();
    app.add_option("--state", f->state, "only jobs in this state (any case: running)")
        ->type_name("S");
    daemon::repeated(
        app.add_option("--label", f->labels, "only jobs with this label; repeated: all of them"))
        ->type_name("KEY=VALUE");
    daemon::add_count(app, "--page-size", f->page_size, "jobs per page (0: the daemon's default)");
    app.add_option("--page-token", f->page_token, "the page a previous list named")->type_name("T");
    add_client_flags(app, f->client);
    return [f] { return list(*f); };
}

CommandRun events_command(CLI::App& app) {
    auto f = std::make_shared<EventsFlags>();
    add_one_job_flags(app, f->job);
    daemon::add_count(app, "--since", f->since, "only events after this sequence number");
    app.add_flag("--follow", f->follow, "stream new events until the job ends");
    return [f] { return events(*f); };
}

CommandRun delete_command(CLI::App& app) {
    auto f = std::make_shared<OneJobFlags>();
    add_one_job_flags(app, *f);
    return [f] { return remove(*f); };
}

CommandRun one_job_command(CLI::App& app, const std::string& command) {
    auto f = std::make_shared<OneJobFlags>();
    add_one_job_flags(app, *f);
    return [f, command] { return single(command, *f); };
}

}  // namespace deltatune::cli
