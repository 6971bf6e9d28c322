// What the job subcommands of the `deltatune` CLI share: the channel to the daemon (--address or
// $DELTATUNE_ADDRESS, default localhost:7070; bearer token from --token-file or $DELTATUNE_TOKEN),
// job-name normalisation and output (human text, --output json in protobuf's JSON mapping, or for
// get --output yaml the job file that resubmits the job).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/command_line.h"
#include "deltatune/v1/service.grpc.pb.h"

namespace deltatune::cli {

// The flags of every command that talks to the daemon (add_client_flags).
struct ClientFlags {
    std::string address = "localhost:7070";
    std::string token_file;
    bool tls = false;
    std::string ca_file;
    std::string output = "text";
    double timeout_seconds = 30;
};
// Declares them on `app`, under their own heading in --help.
void add_client_flags(CLI::App& app, ClientFlags& flags);

class JobClient {
  public:
    // `yaml_ok`: the command takes --output yaml (get); elsewhere it is a usage error.
    static absl::StatusOr<JobClient> connect(const ClientFlags& flags, bool yaml_ok = false);
    v1::FineTuningService::Stub& stub() { return *stub_; }
    // The same channel, for the daemon's other services (AgentService).
    std::shared_ptr<grpc::Channel> channel() const { return channel_; }
    // A context with the bearer token and, unless streaming, the --timeout deadline (default 30 s).
    std::unique_ptr<grpc::ClientContext> context(bool streaming = false) const;
    bool json() const { return json_; }
    bool yaml() const { return yaml_; }

  private:
    std::shared_ptr<grpc::Channel> channel_;
    std::unique_ptr<v1::FineTuningService::Stub> stub_;
    std::string token_;
    double timeout_seconds_ = 30;
    bool json_ = false;
    bool yaml_ = false;
};

// What a command on one job declares: the client's flags and the job (JOB, its one argument).
struct OneJobFlags {
    ClientFlags client;
    std::string job;
};
void add_one_job_flags(CLI::App& app, OneJobFlags& flags);
// ... and what it runs with: the job's full name and a client (`yaml_ok`: it takes --output yaml).
struct OneJob {
    std::string name;
    JobClient client;
};
absl::StatusOr<OneJob> one_job(const OneJobFlags& flags, bool yaml_ok = false);

// "abc" -> "jobs/abc"; "jobs/abc" unchanged.
std::string job_name(const std::string& id);
std::string to_json(const google::protobuf::Message& m);
std::string state_name(v1::Job::State s);
bool is_terminal(v1::Job::State s);
// One human line per job: id, display name, state, progress, loss.
std::string job_line(const v1::Job& job);
// Exit statuses of the job commands, by kind of failure (README "Command line").
enum ExitCode : int {
    kExitOk = 0,
    kExitOther = 1,         // anything not below (INTERNAL, UNKNOWN, ...)
    kExitUsage = 2,         // a bad command line or job file (INVALID_ARGUMENT)
    kExitNotFound = 3,      // no such job, or a file that cannot be opened
    kExitUnavailable = 4,   // the daemon cannot be reached in time (UNAVAILABLE, DEADLINE_EXCEEDED)
    kExitRefused = 5,       // the daemon refuses it now (FAILED_PRECONDITION, ALREADY_EXISTS,
                            // RESOURCE_EXHAUSTED, ABORTED)
    kExitUnauthorised = 6,  // UNAUTHENTICATED, PERMISSION_DENIED
    kExitJobFailed = 7,     // a watched job ended FAILED or CANCELLED
};
int exit_code(grpc::StatusCode code);
int exit_code(absl::StatusCode code);
// Prints "deltatune: CODE: message" on stderr and returns exit_code(s).
int report_rpc_error(const grpc::Status& s);
// Prints "deltatune COMMAND: message" on stderr and returns exit_code(s.code()).
int fail(const std::string& command, const absl::Status& s);
}  // namespace deltatune::cli
