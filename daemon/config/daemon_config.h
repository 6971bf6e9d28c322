// The supervisor's own configuration (configs/daemon.yaml), loaded once at start-up with yaml-cpp.
// Unknown keys are rejected with their path; every field has a default so an empty file is valid
// (a loopback-only daemon under /var/lib/deltatune). load -> defaults -> validate, then this
// struct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune::daemon {

// Bounds on untrusted input: gRPC messages and YAML documents (docs/operations.md).
struct InputLimits {
    int64_t max_request_bytes = 4 << 20;   // gRPC receive limit and YAML file size
    int max_yaml_depth = 32;               // nesting of mappings and sequences
    int max_list_length = 1024;            // entries of any list or map in a job spec
    int http_connections = 256;            // admin HTTP connections in total
    int http_connections_per_client = 16;  // and from one address (a proxy counts as one)
};

// Folders that job paths must resolve under, after symlinks. Relative job paths are taken
// relative to the first root of their kind.
struct PathRoots {
    std::vector<std::string> models;   // model folders and tokenizers
    std::vector<std::string> data;     // train/eval JSONL files (tokenizers too)
    std::vector<std::string> outputs;  // output_dir
};

struct DaemonConfig {
    std::string grpc_address = "127.0.0.1:7070";
    std::string http_address = "127.0.0.1:9090";
    std::string state_dir = "/var/lib/deltatune";  // SQLite store, rank socket, per-job folders
    PathRoots roots;                               // defaults: <state_dir>/{models,data,outputs}
    std::string auth_token_file;  // bearer tokens, one per line; empty = no auth (loopback only)
    std::string tls_cert_file;    // PEM; both or neither
    std::string tls_key_file;
    int max_concurrent_jobs = 1;
    double heartbeat_timeout_seconds = 60;  // a rank silent this long is killed (HEARTBEAT_LOST)
    double shutdown_grace_seconds = 30;     // SIGTERM: wait this long for ranks to checkpoint
    double rank_term_grace_seconds = 2;     // SIGTERM -> SIGKILL delay when killing ranks
    // The binary run as `<rank_executable> rank ...`; empty = this executable. Tests point it at a
    // fake rank so they do not depend on the trainer.
    std::string rank_executable;
    // Memory of one GPU, for the memory planner's admission check of GPU jobs (H200: 141 GiB).
    double gpu_memory_gib = 141;
    // GPUs this daemon may give its jobs' ranks (rank R of a job uses the R-th visible device);
    // -1 = every CUDA device visible at startup (CUDA_VISIBLE_DEVICES).
    int gpus = -1;
    // CPU jobs are admitted against these: resources.cpu_ranks at most cpu_cores, and cpu_ranks
    // times cpu_rank_memory_gib at most cpu_memory_gib. -1 = this machine's cores / memory.
    int cpu_cores = -1;
    double cpu_memory_gib = -1;
    double cpu_rank_memory_gib = 1.0;
    InputLimits limits;
};

// Parses YAML text (`origin` names it in messages), fills defaults and validates.
absl::StatusOr<DaemonConfig> parse_daemon_config(const std::string& text,
                                                 const std::string& origin = "daemon config");
absl::StatusOr<DaemonConfig> load_daemon_config(const std::string& path);
// Cross-field checks, quoting values; also refuses a non-loopback listener without auth.
absl::Status validate_daemon_config(const DaemonConfig& config);

// HOST:PORT or [IPV6]:PORT split (the host without brackets), the port in [0, 65535] (0: the
// system picks one); InvalidArgument quoting the address otherwise.
struct HostPort {
    std::string host;
    int port = 0;
};
absl::StatusOr<HostPort> parse_host_port(const std::string& address);

// True for HOST:PORT with a literal in 127.0.0.0/8, [::1] or localhost as the host, and for unix:
// addresses.
bool is_loopback_address(const std::string& address);

// The text of tls.cert_file or tls.key_file (PEM), for the gRPC and HTTP listeners alike.
absl::StatusOr<std::string> read_tls_file(const std::string& path);

}  // namespace deltatune::daemon
