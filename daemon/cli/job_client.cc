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

namespace {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> channel_credentials(const Flags& flags) {
    return daemon::client_channel_credentials(flags.get("ca-file", ""), flags.has("tls"));
}

}  // namespace

absl::StatusOr<JobClient> JobClient::connect(const Flags& flags, bool yaml_ok) {
    JobClient c;
    const char* env_addr = std::getenv("DELTATUNE_ADDRESS");
    const std::string address =
        flags.get("address", env_addr && *env_addr ? env_addr : "localhost:7070");
    std::string token_file = flags.get("token-file");
    if (token_file.empty() && std::getenv("DELTATUNE_TOKEN_FILE"))
        token_file = std::getenv("DELTATUNE_TOKEN_FILE");
    if (!token_file.empty()) {
        // Read as the daemon reads its own token file; the CLI sends the first token.
        DT_ASSIGN_OR_RETURN(const std::vector<std::string> tokens,
                            daemon::read_token_file(token_file, "--token-file"));
        c.token_ = tokens.front();
    } else if (const char* t = std::getenv("DELTATUNE_TOKEN")) {
        c.token_ = std::string(absl::StripAsciiWhitespace(t));
        DT_RETURN_IF_ERROR(daemon::check_token(c.token_, "DELTATUNE_TOKEN"));
    }
    const std::string output = flags.get("output", "text");
    if (output != "text" && output != "json" && output != "yaml") {
        return absl::InvalidArgumentError(
            absl::StrCat("--output: expected text, json or yaml, got '", output, "'"));
    }
    if (output == "yaml" && !yaml_ok) {
        return absl::InvalidArgumentError("--output yaml applies to get only");
    }
    c.json_ = output == "json";
    c.yaml_ = output == "yaml";
    auto timeout = flags.get_double("timeout", 30);
    if (!timeout.ok()) return timeout.status();
    c.timeout_seconds_ = *timeout;
    DT_ASSIGN_OR_RETURN(auto credentials, channel_credentials(flags));
    grpc::ChannelArguments channel_args;
    channel_args.SetMaxReceiveMessageSize(1 << 30);  // a profile's trace (GetProfile) runs to MBs
    c.channel_ = grpc::CreateCustomChannel(address, credentials, channel_args);
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

absl::StatusOr<OneJob> one_job(const std::vector<std::string>& args,
                               const std::set<std::string>& extra, std::set<std::string> boolean,
                               bool yaml_ok) {
    boolean.insert(kClientBoolFlags.begin(), kClientBoolFlags.end());
    DT_ASSIGN_OR_RETURN(Flags flags, Flags::parse(args, with_client_flags(extra), boolean));
    if (flags.positional().size() != 1) return absl::InvalidArgumentError("expected one JOB_ID");
    DT_ASSIGN_OR_RETURN(JobClient client, JobClient::connect(flags, yaml_ok));
    std::string name = job_name(flags.positional()[0]);
    return OneJob{std::move(flags), std::move(name), std::move(client)};
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

std::set<std::string> with_client_flags(std::set<std::string> flags) {
    flags.insert(kClientFlags.begin(), kClientFlags.end());
    return flags;
}

}  // namespace deltatune::cli
