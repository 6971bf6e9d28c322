// What the job subcommands of the `deltatune` CLI share: the channel to the daemon (--address or
// $DELTATUNE_ADDRESS, default localhost:7070; bearer token from --token-file or $DELTATUNE_TOKEN),
// job-name normalisation and output (human text, or --output json in protobuf's JSON mapping).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "daemon/cli/flags.h"
#include "deltatune/v1/service.grpc.pb.h"

namespace deltatune::cli {

// Flags every job subcommand accepts.
inline const std::set<std::string> kClientFlags = {"address", "token-file", "output", "timeout"};

class JobClient {
  public:
    static absl::StatusOr<JobClient> connect(const Flags& flags);
    v1::FineTuningService::Stub& stub() { return *stub_; }
    // A context with the bearer token and, unless streaming, the --timeout deadline (default 30 s).
    std::unique_ptr<grpc::ClientContext> context(bool streaming = false) const;
    bool json() const { return json_; }

  private:
    std::shared_ptr<grpc::Channel> channel_;
    std::unique_ptr<v1::FineTuningService::Stub> stub_;
    std::string token_;
    double timeout_seconds_ = 30;
    bool json_ = false;
};

// "abc" -> "jobs/abc"; "jobs/abc" unchanged.
std::string job_name(const std::string& id);
std::string to_json(const google::protobuf::Message& m);
std::string state_name(v1::Job::State s);
bool is_terminal(v1::Job::State s);
// One human line per job: id, state, progress, loss.
std::string job_line(const v1::Job& job);
// Prints "deltatune: <grpc code>: <message>" to stderr and returns the exit code 1.
int report_rpc_error(const grpc::Status& s);

}  // namespace deltatune::cli
