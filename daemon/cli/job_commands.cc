// deltatune submit|get|list|watch|cancel|pause|resume|events|checkpoints|profile: the job
// commands.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "daemon/cli/progress_line.h"
#include "daemon/config/job_yaml.h"
#include "daemon/rank/spec_to_config.h"
#include "runtime/base/status_macros.h"
#include "runtime/train/trainer_inputs.h"

namespace deltatune::cli {

namespace {

// What a command on one job starts with: its flags (the client's and `extra`), the job's name
// (the one positional argument) and a client. Errors are the command's usage errors.
struct OneJob {
    Flags flags;
    std::string name;
    JobClient client;
};
absl::StatusOr<OneJob> one_job(const std::vector<std::string>& args,
                               const std::set<std::string>& extra = {},
                               std::set<std::string> boolean = {}) {
    boolean.insert(kClientBoolFlags.begin(), kClientBoolFlags.end());
    DT_ASSIGN_OR_RETURN(Flags flags, Flags::parse(args, with_client_flags(extra), boolean));
    if (flags.positional().size() != 1) return absl::InvalidArgumentError("expected one JOB_ID");
    DT_ASSIGN_OR_RETURN(JobClient client, JobClient::connect(flags));
    std::string name = job_name(flags.positional()[0]);
    return OneJob{std::move(flags), std::move(name), std::move(client)};
}

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
    while (reader->Read(&job)) {
        if (!client.json()) print_progress(job, tty, rate, last_line);
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

int submit(const std::vector<std::string>& args) {
    auto flags =
        Flags::parse(args, with_client_flags({"request-id"}), {"watch", "validate-only", "tls"});
    if (!flags.ok()) return fail("submit", flags.status());
    if (flags->positional().size() != 1)
        return fail("submit", absl::InvalidArgumentError("expected one JOB.yaml"));
    const std::string path = flags->positional()[0];
    std::ifstream in(path);
    if (!in) return fail("submit", absl::NotFoundError(path + ": cannot open"));
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = daemon::parse_job_yaml(text.str(), daemon::InputLimits{});
    if (!parsed.ok())
        return fail("submit", absl::InvalidArgumentError(
                                  absl::StrCat(path, ": ", parsed.status().message())));
    auto client = JobClient::connect(*flags);
    if (!client.ok()) return fail("submit", client.status());
    v1::CreateJobRequest req;
    *req.mutable_spec() = parsed->spec;
    req.set_request_id(flags->get("request-id"));
    req.set_validate_only(flags->has("validate-only"));
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
    if (flags->has("watch")) {
        if (!client->json()) std::fprintf(stderr, "submitted %s\n", job.name().c_str());
        return watch(*client, job.name());
    }
    std::printf("%s\n", client->json() ? to_json(job).c_str() : job.name().c_str());
    return 0;
}

// delete: a finished job and its events leave the daemon's store (its output folder stays).
int remove(const std::vector<std::string>& args) {
    auto job = one_job(args);
    if (!job.ok()) return fail("delete", job.status());
    v1::DeleteJobRequest r;
    r.set_name(job->name);
    google::protobuf::Empty empty;
    auto ctx = job->client.context();
    const grpc::Status s = job->client.stub().DeleteJob(ctx.get(), r, &empty);
    if (!s.ok()) return report_rpc_error(s);
    std::printf("%s\n", job->client.json() ? ("{\"deleted\": \"" + r.name() + "\"}").c_str()
                                           : ("deleted " + r.name()).c_str());
    return 0;
}

// get, cancel, pause, resume: one job name in, one Job out.
int single(const std::string& command, const std::vector<std::string>& args) {
    auto one = one_job(args);
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
    std::printf("%s\n", client.json() ? to_json(job).c_str() : job_line(job).c_str());
    return 0;
}

int list(const std::vector<std::string>& args) {
    auto flags = Flags::parse(
        args, with_client_flags({"state", "page-size", "page-token", "label"}), kClientBoolFlags);
    if (!flags.ok()) return fail("list", flags.status());
    auto client = JobClient::connect(*flags);
    if (!client.ok()) return fail("list", client.status());
    v1::ListJobsRequest req;
    if (flags->has("state")) {
        v1::Job::State st;  // any case: --state running
        if (!v1::Job::State_Parse(absl::AsciiStrToUpper(flags->get("state")), &st)) {
            return fail("list", absl::InvalidArgumentError("--state: unknown state '" +
                                                           flags->get("state") + "'"));
        }
        req.set_state(st);
    }
    auto size = flags->get_uint("page-size", 0);
    if (!size.ok()) return fail("list", size.status());
    req.set_page_size(static_cast<int32_t>(std::min<uint64_t>(*size, INT32_MAX)));
    req.set_page_token(flags->get("page-token"));
    for (const std::string& kv : flags->get_all("label")) {  // repeated: every one must match
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

std::string event_line(const v1::JobEvent& e) {
    std::string line = absl::StrFormat("%6lld %-22s %s", static_cast<long long>(e.sequence()),
                                       e.type(), e.message());
    for (const auto& [k, v] : e.metrics()) line += absl::StrFormat(" %s=%.6g", k, v);
    for (const auto& [k, v] : e.details()) line += absl::StrCat(" ", k, "=", v);
    return line;
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

int events(const std::vector<std::string>& args) {
    auto one = one_job(args, {"since"}, {"follow"});
    if (!one.ok()) return fail("events", one.status());
    const Flags* flags = &one->flags;
    JobClient* client = &one->client;
    auto since = flags->get_uint("since", 0);
    if (!since.ok()) return fail("events", since.status());
    const std::string& name = one->name;
    // Without --follow: what exists now, at once (the stream would wait for its first heartbeat).
    if (!flags->has("follow")) return print_events(*client, name, static_cast<int64_t>(*since));
    auto ctx = client->context(/*streaming=*/true);
    v1::StreamJobEventsRequest req;
    req.set_name(name);
    req.set_since_sequence(static_cast<int64_t>(*since));
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

// Every page of a job's checkpoints, in one response.
grpc::Status all_checkpoints(JobClient& client, const std::string& name,
                             v1::ListCheckpointsResponse* all) {
    v1::ListCheckpointsRequest req;
    req.set_name(name);
    do {
        v1::ListCheckpointsResponse page;
        auto ctx = client.context();
        const grpc::Status s = client.stub().ListCheckpoints(ctx.get(), req, &page);
        if (!s.ok()) return s;
        for (auto& c : *page.mutable_checkpoints()) *all->add_checkpoints() = std::move(c);
        req.set_page_token(page.next_page_token());
    } while (!req.page_token().empty());
    return grpc::Status::OK;
}

int checkpoints(const std::vector<std::string>& args) {
    auto job = one_job(args);
    if (!job.ok()) return fail("checkpoints", job.status());
    v1::ListCheckpointsResponse resp;
    const grpc::Status s = all_checkpoints(job->client, job->name, &resp);
    if (!s.ok()) return report_rpc_error(s);
    if (job->client.json()) {
        std::printf("%s\n", to_json(resp).c_str());
        return 0;
    }
    for (const auto& c : resp.checkpoints()) {
        std::printf("step %-8lld %12lld bytes  %s  sha256 %s\n", static_cast<long long>(c.step()),
                    static_cast<long long>(c.bytes()), c.path().c_str(),
                    c.manifest_sha256().c_str());
    }
    return 0;
}

// The checkpoint of step `step` (0: the newest), or NotFound naming the steps there are.
absl::StatusOr<v1::Checkpoint> pick_checkpoint(const v1::ListCheckpointsResponse& all,
                                               const std::string& name, uint64_t step) {
    std::vector<std::string> steps;
    for (const auto& c : all.checkpoints()) {
        if (step != 0 && static_cast<uint64_t>(c.step()) == step) return c;
        steps.push_back(absl::StrCat(c.step()));
    }
    if (step == 0 && all.checkpoints_size() > 0) return all.checkpoints(all.checkpoints_size() - 1);
    return absl::NotFoundError(steps.empty()
                                   ? absl::StrCat(name, " has no checkpoint to export")
                                   : absl::StrCat(name, " has no checkpoint of step ", step,
                                                  " (steps ", absl::StrJoin(steps, ", "), ")"));
}

// A committed checkpoint as a Hugging Face folder, written here: run it where the job's files
// are (the daemon's machine or a shared filesystem).
// A checkpoint as the job's own export would write it: the whole model, or for a LoRA job its
// adapter as a PEFT folder (`--merged`: merged into the base) from the job's own adapter spec.
int export_job(const std::vector<std::string>& args) {
    auto one = one_job(args, {"step", "out"}, {"merged"});
    if (!one.ok()) return fail("export", one.status());
    const absl::StatusOr<uint64_t> step = one->flags.get_uint("step", 0);
    if (!step.ok()) return fail("export", step.status());
    const Flags* flags = &one->flags;
    JobClient* client = &one->client;
    const std::string& name = one->name;
    v1::GetJobRequest get;
    get.set_name(name);
    v1::Job job;
    auto ctx = client->context();
    if (grpc::Status s = client->stub().GetJob(ctx.get(), get, &job); !s.ok()) {
        return report_rpc_error(s);
    }
    v1::ListCheckpointsResponse all;
    if (grpc::Status s = all_checkpoints(*client, name, &all); !s.ok()) return report_rpc_error(s);
    const absl::StatusOr<v1::Checkpoint> cp = pick_checkpoint(all, name, *step);
    if (!cp.ok()) return fail("export", cp.status());
    const std::string out =
        flags->get("out", absl::StrCat(job.spec().output_dir(), "/export-step-", cp->step()));
    TrainConfig c = train_config_from_spec(job.spec());
    if (flags->has("merged")) {
        if (!c.lora) {
            return fail("export", absl::InvalidArgumentError(
                                      absl::StrCat("--merged: ", name, " is not a LoRA job")));
        }
        c.lora_merged_export = true;
    }
    const absl::StatusOr<int64_t> exported = export_checkpoint(c, cp->path(), out);
    if (!exported.ok()) return fail("export", exported.status());
    std::printf("exported step %lld of %s to %s%s\n", static_cast<long long>(*exported),
                name.c_str(), out.c_str(),
                !c.lora                ? ""
                : c.lora_merged_export ? " (LoRA merged)"
                                       : " (LoRA, PEFT)");
    return 0;
}

// DownloadProfile's pieces, joined and parsed (GetProfile would refuse a trace over 64 MiB).
grpc::Status download_profile(JobClient* client, const v1::GetProfileRequest& req,
                              v1::Profile* out) {
    auto ctx = client->context();
    std::unique_ptr<grpc::ClientReader<v1::ProfileChunk>> reader =
        client->stub().DownloadProfile(ctx.get(), req);
    std::string bytes;
    v1::ProfileChunk chunk;
    while (reader->Read(&chunk)) {
        if (chunk.offset() != static_cast<int64_t>(bytes.size())) {
            return grpc::Status(grpc::StatusCode::DATA_LOSS, "profile pieces out of order");
        }
        if (bytes.empty()) {
            bytes.reserve(
                static_cast<size_t>(std::clamp<int64_t>(chunk.total_bytes(), 0, 1 << 30)));
        }
        bytes += chunk.data();
    }
    grpc::Status s = reader->Finish();
    if (s.ok() && (!out->ParseFromString(bytes) || out->profile_id() != req.profile_id())) {
        s = grpc::Status(grpc::StatusCode::DATA_LOSS, "the profile does not parse");
    }
    return s;
}

// Orders a profile of the job's next steps, waits for it, writes the Chrome trace and prints
// where the time went.
int profile(const std::vector<std::string>& args) {
    auto one = one_job(args, {"steps", "out", "wait"});
    if (!one.ok()) return fail("profile", one.status());
    const absl::StatusOr<uint64_t> steps = one->flags.get_uint("steps", 3);
    const absl::StatusOr<uint64_t> wait = one->flags.get_uint("wait", 600);
    if (!steps.ok()) return fail("profile", steps.status());
    if (!wait.ok()) return fail("profile", wait.status());
    JobClient* client = &one->client;
    v1::ProfileJobRequest req;
    req.set_name(one->name);
    req.set_steps(static_cast<int32_t>(std::min<uint64_t>(*steps, 1 << 20)));
    v1::ProfileJobResponse ordered;
    auto ctx = client->context();
    if (grpc::Status s = client->stub().ProfileJob(ctx.get(), req, &ordered); !s.ok()) {
        return report_rpc_error(s);
    }
    std::fprintf(stderr, "profile %s: tracing the next %llu step(s) of %s\n",
                 ordered.profile_id().c_str(), static_cast<unsigned long long>(*steps),
                 one->name.c_str());
    v1::GetProfileRequest get;
    get.set_name(one->name);
    get.set_profile_id(ordered.profile_id());
    v1::Profile p;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(*wait);
    for (;;) {
        auto c = client->context();
        const grpc::Status s = download_profile(client, get, &p);
        if (s.ok()) break;
        if (s.error_code() != grpc::StatusCode::NOT_FOUND ||
            std::chrono::steady_clock::now() > deadline) {
            return report_rpc_error(s);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    const std::string out =
        one->flags.get("out", absl::StrCat("profile-", p.profile_id(), ".trace.json"));
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f.write(p.trace_json().data(), static_cast<std::streamsize>(p.trace_json().size()));
    if (!f.flush())
        return fail("profile", absl::UnavailableError(absl::StrCat("cannot write ", out)));
    p.clear_trace_json();
    if (client->json()) {
        std::printf("%s\n", to_json(p).c_str());
        return kExitOk;
    }
    std::printf("steps %lld..%lld: %.1f ms per step, GPU busy %.0f%%, NCCL exposed %.1f ms\n",
                static_cast<long long>(p.first_step()),
                static_cast<long long>(p.first_step() + p.steps() - 1), p.wall_ms() / p.steps(),
                p.wall_ms() > 0 ? 100 * p.gpu_busy_ms() / p.wall_ms() : 0.0, p.nccl_exposed_ms());
    std::printf("%10s %9s %7s  %s\n", "ms", "launches", "share", "kernel");
    for (int i = 0; i < p.kernels_size() && i < 20; ++i) {
        const v1::Profile::Kernel& k = p.kernels(i);
        std::printf(
            "%10.2f %9lld %6.1f%%  %s\n", k.total_ms(), static_cast<long long>(k.launches()),
            p.gpu_busy_ms() > 0 ? 100 * k.total_ms() / p.gpu_busy_ms() : 0.0, k.name().c_str());
    }
    std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", out.c_str());
    return kExitOk;
}

}  // namespace

int job_command(const std::string& command, const std::vector<std::string>& args) {
    if (command == "export") return export_job(args);
    if (command == "submit") return submit(args);
    if (command == "list") return list(args);
    if (command == "events") return events(args);
    if (command == "checkpoints") return checkpoints(args);
    if (command == "profile") return profile(args);
    if (command == "delete") return remove(args);
    return single(command, args);
}

}  // namespace deltatune::cli
