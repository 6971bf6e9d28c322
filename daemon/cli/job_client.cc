// Channel, auth and printing helpers for the job subcommands.
#include "daemon/cli/job_client.h"

#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/auth.h"
#include "daemon/cli/progress_line.h"
#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"

namespace deltatune::cli {

void add_client_flags(CLI::App& app, ClientFlags& f) {
    const std::string group = "Connection to deltatuned";
    app.add_option("--address", f.address, "the daemon's gRPC address")
        ->envname("DELTATUNE_ADDRESS")
        ->type_name("HOST:PORT")
        ->group(group);
    app.add_option("--token-file", f.token_file,
                   "bearer token file, as the daemon reads it (else $DELTATUNE_TOKEN)")
        ->envname("DELTATUNE_TOKEN_FILE")
        ->type_name("FILE")
        ->group(group);
    app.add_flag("--tls", f.tls, "speak TLS, checking the system's CAs (or $DELTATUNE_TLS=1)")
        ->group(group);
    app.add_option("--ca-file", f.ca_file,
                   "speak TLS, checking the daemon's certificate against this CA (or "
                   "$DELTATUNE_CA_FILE)")
        ->type_name("PEM")
        ->group(group);
    daemon::one_of(
        app.add_option("--output", f.output,
                       "text, or json (the proto3 JSON mapping of the API's messages), or for get "
                       "yaml (the job file that resubmits the job)"),
        {"text", "json", "yaml"})
        ->group(group);
    app.add_option("--timeout", f.timeout_seconds, "seconds a call may take")
        ->check(daemon::number())
        ->type_name("S")
        ->group(group);
}

absl::StatusOr<JobClient> JobClient::connect(const ClientFlags& flags, bool yaml_ok) {
    JobClient c;
    if (!flags.token_file.empty()) {
        // Read as the daemon reads its own token file; the CLI sends the first token.
        DT_ASSIGN_OR_RETURN(const std::vector<std::string> tokens,
                            daemon::read_token_file(flags.token_file, "--token-file"));
        c.token_ = tokens.front();
    } else if (const char* t = std::getenv("DELTATUNE_TOKEN")) {
        c.token_ = std::string(absl::StripAsciiWhitespace(t));
        DT_RETURN_IF_ERROR(daemon::check_token(c.token_, "DELTATUNE_TOKEN"));
    }
    if (flags.output == "yaml" && !yaml_ok) {
        return absl::InvalidArgumentError("--output yaml applies to get only");
    }
    c.json_ = flags.output == "json";
    c.yaml_ = flags.output == "yaml";
    c.timeout_seconds_ = flags.timeout_seconds;
    DT_ASSIGN_OR_RETURN(auto credentials,
                        daemon::client_channel_credentials(flags.ca_file, flags.tls));
    grpc::ChannelArguments channel_args;
    channel_args.SetMaxReceiveMessageSize(1 << 30);  // a profile's trace (GetProfile) runs to MBs
    c.channel_ = grpc::CreateCustomChannel(flags.address, credentials, channel_args);
    c.stub_ = v1::FineTuningService::NewStub(c.channel_);
    return c;
}

std::unique_ptr<grpc::ClientContext> JobClient::context(bool streaming) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
    if (!streaming) {
        ctx->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds_ * 1000)));
    }
    return ctx;
}

std::string job_name(const std::string& id) {
    return id.rfind("jobs/", 0) == 0 ? id : "jobs/" + id;
}

std::string to_json(const google::protobuf::Message& m) {
    std::string out;
    google::protobuf::util::JsonPrintOptions o;
    o.preserve_proto_field_names = false;
    (void)google::protobuf::util::MessageToJsonString(m, &out, o);
    return out;
}

std::string state_name(v1::Job::State s) {
    return v1::Job::State_Name(s);
}

bool is_terminal(v1::Job::State s) {
    return s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED;
}

void add_one_job_flags(CLI::App& app, OneJobFlags& flags) {
    app.add_option("JOB", flags.job, "the job: its id, or jobs/ID")->required();
    add_client_flags(app, flags.client);
}

absl::StatusOr<OneJob> one_job(const OneJobFlags& flags, bool yaml_ok) {
    DT_ASSIGN_OR_RETURN(JobClient client, JobClient::connect(flags.client, yaml_ok));
    return OneJob{job_name(flags.job), std::move(client)};
}

std::string job_line(const v1::Job& job) {
    std::string line = absl::StrFormat("%-24s", job.name());
    // The name people gave it, within bounds: a list stays one line per job.
    if (const std::string& shown = job.spec().display_name(); !shown.empty()) {
        absl::StrAppend(&line, " ", shown.size() > 32 ? shown.substr(0, 31) + "~" : shown);
    }
    absl::StrAppend(&line, absl::StrFormat(" %-11s", state_name(job.state())));
    if (job.progress().total_steps() > 0) {  // 0 until the ranks have planned the run
        line += absl::StrFormat(" step %lld/%lld", static_cast<long long>(job.progress().step()),
                                static_cast<long long>(job.progress().total_steps()));
    }
    auto it = job.latest_metrics().find("loss");
    if (it != job.latest_metrics().end()) line += absl::StrFormat("  loss %.4f", it->second);
    it = job.latest_metrics().find("eval_loss");
    if (it != job.latest_metrics().end()) line += absl::StrFormat("  eval %.4f", it->second);
    if (job.state() == v1::Job::QUEUED && job.queue_position() > 0)
        line += absl::StrCat("  queue #", job.queue_position());
    line += reason_and_message(job, "  ");
    if (!job.result_model().empty()) line += absl::StrCat("  model ", job.result_model());
    absl::StripTrailingAsciiWhitespace(&line);  // the state's padding when nothing follows it
    return line;
}

int report_rpc_error(const grpc::Status& s) {
    static const char* kCodes[] = {"OK",
                                   "CANCELLED",
                                   "UNKNOWN",
                                   "INVALID_ARGUMENT",
                                   "DEADLINE_EXCEEDED",
                                   "NOT_FOUND",
                                   "ALREADY_EXISTS",
                                   "PERMISSION_DENIED",
                                   "RESOURCE_EXHAUSTED",
                                   "FAILED_PRECONDITION",
                                   "ABORTED",
                                   "OUT_OF_RANGE",
                                   "UNIMPLEMENTED",
                                   "INTERNAL",
                                   "UNAVAILABLE",
                                   "DATA_LOSS",
                                   "UNAUTHENTICATED"};
    const int code = static_cast<int>(s.error_code());
    std::fprintf(stderr, "deltatune: %s: %s\n", code >= 0 && code <= 16 ? kCodes[code] : "?",
                 s.error_message().c_str());
    return exit_code(s.error_code());
}

int exit_code(grpc::StatusCode code) {
    // grpc::StatusCode and absl::StatusCode share the canonical numbering.
    return exit_code(static_cast<absl::StatusCode>(static_cast<int>(code)));
}

int exit_code(absl::StatusCode code) {
    switch (code) {
        case absl::StatusCode::kOk:
            return kExitOk;
        case absl::StatusCode::kInvalidArgument:
        case absl::StatusCode::kOutOfRange:
            return kExitUsage;
        case absl::StatusCode::kNotFound:
            return kExitNotFound;
        case absl::StatusCode::kUnavailable:
        case absl::StatusCode::kDeadlineExceeded:
            return kExitUnavailable;
        case absl::StatusCode::kFailedPrecondition:
        case absl::StatusCode::kAlreadyExists:
        case absl::StatusCode::kResourceExhausted:
        case absl::StatusCode::kAborted:
            return kExitRefused;
        case absl::StatusCode::kUnauthenticated:
        case absl::StatusCode::kPermissionDenied:
            return kExitUnauthorised;
        default:
            return kExitOther;
    }
}

int fail(const std::string& command, const absl::Status& s) {
    std::fprintf(stderr, "deltatune %s: %s\n", command.c_str(), std::string(s.message()).c_str());
    return exit_code(s.code());
}

}  // namespace deltatune::cli
