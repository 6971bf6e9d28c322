// configs/daemon.yaml -> DaemonConfig. Each section is a table of key -> setter so an unknown key
// is an error naming its full path, and a value of the wrong type names its path and value.
#include "daemon/config/daemon_config.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/config/job_yaml.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

using Setter = std::function<absl::Status(const YAML::Node&, const std::string& path)>;

absl::Status wrong(const std::string& path, const char* want, const YAML::Node& n) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expected ", want, n.IsScalar() ? absl::StrCat(", got '", n.Scalar(), "'") : ""));
}

absl::Status parse_section(const YAML::Node& node, const std::string& path,
                           const std::map<std::string, Setter>& setters) {
    if (node.IsNull()) return absl::OkStatus();
    if (!node.IsMap()) return wrong(path.empty() ? "config" : path, "a mapping", node);
    for (const auto& kv : node) {
        const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
        const std::string child = path.empty() ? key : path + "." + key;
        const auto it = setters.find(key);
        if (it == setters.end()) return absl::InvalidArgumentError(child + ": unknown key");
        if (!kv.second.IsNull()) DT_RETURN_IF_ERROR(it->second(kv.second, child));
    }
    return absl::OkStatus();
}

Setter string_to(std::string* out) {
    return [out](const YAML::Node& n, const std::string& path) {
        if (!n.IsScalar()) return wrong(path, "a string", n);
        *out = n.Scalar();
        return absl::OkStatus();
    };
}

Setter strings_to(std::vector<std::string>* out) {
    return [out](const YAML::Node& n, const std::string& path) {
        if (!n.IsSequence()) return wrong(path, "a list of strings", n);
        out->clear();
        for (size_t i = 0; i < n.size(); ++i) {
            if (!n[i].IsScalar()) return wrong(absl::StrCat(path, "[", i, "]"), "a string", n[i]);
            out->push_back(n[i].Scalar());
        }
        return absl::OkStatus();
    };
}

template <typename T>
Setter integer_to(T* out) {
    return [out](const YAML::Node& n, const std::string& path) {
        if (!n.IsScalar()) return wrong(path, "an integer", n);
        const std::string& s = n.Scalar();
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
        if (ec != std::errc() || end != s.data() + s.size()) return wrong(path, "an integer", n);
        return absl::OkStatus();
    };
}

Setter seconds_to(double* out) {
    return [out](const YAML::Node& n, const std::string& path) {
        if (!n.IsScalar()) return wrong(path, "a number of seconds", n);
        char* end = nullptr;
        *out = std::strtod(n.Scalar().c_str(), &end);
        if (n.Scalar().empty() || *end != '\0') return wrong(path, "a number of seconds", n);
        return absl::OkStatus();
    };
}

absl::Status parse_root(const YAML::Node& root, DaemonConfig* c) {
    auto section = [](std::map<std::string, Setter> setters) -> Setter {
        return [setters = std::move(setters)](const YAML::Node& n, const std::string& path) {
            return parse_section(n, path, setters);
        };
    };
    return parse_section(
        root, "",
        {
            {"listen", section({{"grpc", string_to(&c->grpc_address)},
                                {"http", string_to(&c->http_address)}})},
            {"state_dir", string_to(&c->state_dir)},
            {"roots", section({{"models", strings_to(&c->roots.models)},
                               {"data", strings_to(&c->roots.data)},
                               {"outputs", strings_to(&c->roots.outputs)}})},
            {"auth", section({{"token_file", string_to(&c->auth_token_file)}})},
            {"tls", section({{"cert_file", string_to(&c->tls_cert_file)},
                             {"key_file", string_to(&c->tls_key_file)}})},
            {"scheduler",
             section({{"max_concurrent_jobs", integer_to(&c->max_concurrent_jobs)},
                      {"heartbeat_timeout_seconds", seconds_to(&c->heartbeat_timeout_seconds)},
                      {"shutdown_grace_seconds", seconds_to(&c->shutdown_grace_seconds)},
                      {"rank_term_grace_seconds", seconds_to(&c->rank_term_grace_seconds)},
                      {"rank_executable", string_to(&c->rank_executable)},
                      {"gpu_memory_gib", seconds_to(&c->gpu_memory_gib)},
                      {"gpus", integer_to(&c->gpus)},
                      {"cpu_cores", integer_to(&c->cpu_cores)},
                      {"cpu_memory_gib", seconds_to(&c->cpu_memory_gib)},
                      {"cpu_rank_memory_gib", seconds_to(&c->cpu_rank_memory_gib)}})},
            {"limits", section({{"max_request_bytes", integer_to(&c->limits.max_request_bytes)},
                                {"max_yaml_depth", integer_to(&c->limits.max_yaml_depth)},
                                {"max_list_length", integer_to(&c->limits.max_list_length)},
                                {"http_connections", integer_to(&c->limits.http_connections)},
                                {"http_connections_per_client",
                                 integer_to(&c->limits.http_connections_per_client)}})},
        });
}

absl::Status in_range(const char* path, double v, double lo, double hi) {
    if (v >= lo && v <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(path, " (", v, ") must be in [", lo, ", ", hi, "]"));
}

// A listener's address: HOST:PORT, [IPV6]:PORT or unix:PATH. gRPC binds a port past 65535 modulo
// 65536 and reports the one configured, so the range is checked here.
absl::Status check_listen_address(const char* field, const std::string& address) {
    if (absl::StartsWith(address, "unix:")) {
        if (address.size() > 5) return absl::OkStatus();
        return absl::InvalidArgumentError(absl::StrCat(field, " (unix:) names no socket path"));
    }
    if (absl::Status s = parse_host_port(address).status(); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(field, " ", s.message()));
    }
    return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> read_tls_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return absl::FailedPreconditionError(absl::StrCat(path, ": cannot open"));
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

absl::StatusOr<HostPort> parse_host_port(const std::string& address) {
    const size_t colon = address.rfind(':');
    std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
    const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
    const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
    if (bracketed) host = host.substr(1, host.size() - 2);
    const bool stray = !bracketed && host.find_first_of("[]:") != std::string::npos;  // bare IPv6
    if (host.empty() || port.empty() || stray) {
        return absl::InvalidArgumentError(
            absl::StrCat("(", address, ") must be HOST:PORT, [IPV6]:PORT or unix:PATH"));
    }
    unsigned value = 0;  // from_chars: digits only, no sign or space
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value > 65535) {
        return absl::InvalidArgumentError(
            absl::StrCat("(", address, "): port '", port, "' must be a number in [0, 65535]"));
    }
    return HostPort{std::move(host), static_cast<int>(value)};
}

bool is_loopback_address(const std::string& address) {
    if (absl::StartsWith(address, "unix:")) return true;
    absl::StatusOr<HostPort> a = parse_host_port(address);
    if (!a.ok()) return false;
    if (a->host == "localhost" || a->host == "::1") return true;
    in_addr v4{};  // a literal in 127.0.0.0/8, not a name that merely starts with "127."
    return inet_pton(AF_INET, a->host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

absl::StatusOr<DaemonConfig> parse_daemon_config(const std::string& text,
                                                 const std::string& origin) {
    DT_ASSIGN_OR_RETURN(const YAML::Node root, load_yaml_bounded(text, InputLimits{}, origin));
    DaemonConfig c;
    if (absl::Status s = parse_root(root, &c); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
    }
    for (auto [roots, name] :
         {std::pair{&c.roots.models, "models"}, std::pair{&c.roots.data, "data"},
          std::pair{&c.roots.outputs, "outputs"}}) {
        if (roots->empty()) roots->push_back(c.state_dir + "/" + name);
    }
    if (absl::Status s = validate_daemon_config(c); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
    }
    return c;
}

absl::StatusOr<DaemonConfig> load_daemon_config(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    std::ostringstream text;
    text << in.rdbuf();
    return parse_daemon_config(text.str(), path);
}

absl::Status validate_daemon_config(const DaemonConfig& c) {
    if (c.grpc_address.empty()) return absl::InvalidArgumentError("listen.grpc is empty");
    DT_RETURN_IF_ERROR(check_listen_address("listen.grpc", c.grpc_address));
    if (!c.http_address.empty()) {
        DT_RETURN_IF_ERROR(check_listen_address("listen.http", c.http_address));
    }
    if (c.state_dir.empty() || c.state_dir.front() != '/') {
        return absl::InvalidArgumentError(
            absl::StrCat("state_dir ('", c.state_dir, "') must be an absolute path"));
    }
    for (const auto* roots : {&c.roots.models, &c.roots.data, &c.roots.outputs}) {
        for (const std::string& root : *roots) {
            if (root.empty() || root.front() != '/') {
                return absl::InvalidArgumentError(
                    absl::StrCat("roots: '", root, "' must be an absolute path"));
            }
        }
    }
    if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
        return absl::InvalidArgumentError("tls.cert_file and tls.key_file go together");
    }
    // A daemon reachable from the network runs training jobs for whoever connects: refuse to
    // listen beyond loopback without a token.
    if (!is_loopback_address(c.grpc_address) && c.auth_token_file.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("listen.grpc (", c.grpc_address,
                                                       ") is not loopback; set auth.token_file"));
    }
    // The admin HTTP listener serves the jobs (specs, paths) too: the same rule.
    if (!c.http_address.empty() && !is_loopback_address(c.http_address) &&
        c.auth_token_file.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("listen.http (", c.http_address,
                                                       ") is not loopback; set auth.token_file"));
    }
    DT_RETURN_IF_ERROR(in_range("scheduler.max_concurrent_jobs", c.max_concurrent_jobs, 1, 1024));
    DT_RETURN_IF_ERROR(
        in_range("scheduler.heartbeat_timeout_seconds", c.heartbeat_timeout_seconds, 0.1, 86400));
    DT_RETURN_IF_ERROR(
        in_range("scheduler.shutdown_grace_seconds", c.shutdown_grace_seconds, 0, 3600));
    DT_RETURN_IF_ERROR(
        in_range("scheduler.rank_term_grace_seconds", c.rank_term_grace_seconds, 0, 600));
    DT_RETURN_IF_ERROR(in_range("scheduler.gpu_memory_gib", c.gpu_memory_gib, 1, 1 << 20));
    DT_RETURN_IF_ERROR(in_range("scheduler.gpus", c.gpus, -1, 1024));
    DT_RETURN_IF_ERROR(in_range("scheduler.cpu_cores", c.cpu_cores, -1, 1 << 16));
    if (c.cpu_memory_gib != -1) {
        DT_RETURN_IF_ERROR(in_range("scheduler.cpu_memory_gib", c.cpu_memory_gib, 0.01, 1 << 20));
    }
    DT_RETURN_IF_ERROR(
        in_range("scheduler.cpu_rank_memory_gib", c.cpu_rank_memory_gib, 0.001, 1 << 20));
    // A root holding the state folder would let a job read or overwrite the daemon's own
    // database and rank specs (an output_dir of "state/jobs.db/..."). Roots inside it are fine.
    std::error_code ec;
    const std::string state = std::filesystem::weakly_canonical(c.state_dir, ec).string();
    for (const auto& [roots, kind] :
         {std::pair{&c.roots.models, "models"}, std::pair{&c.roots.data, "data"},
          std::pair{&c.roots.outputs, "outputs"}}) {
        for (const std::string& root : *roots) {
            const std::string r = std::filesystem::weakly_canonical(root, ec).string();
            if (state == r || absl::StartsWith(state, r == "/" ? r : r + "/")) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "roots.", kind, " '", root, "' holds state_dir '", c.state_dir,
                    "'; jobs could then reach the daemon's state: give them separate folders"));
            }
        }
    }
    DT_RETURN_IF_ERROR(in_range("limits.max_request_bytes",
                                static_cast<double>(c.limits.max_request_bytes), 1024, 64 << 20));
    DT_RETURN_IF_ERROR(in_range("limits.max_yaml_depth", c.limits.max_yaml_depth, 4, 256));
    DT_RETURN_IF_ERROR(in_range("limits.max_list_length", c.limits.max_list_length, 1, 1 << 20));
    DT_RETURN_IF_ERROR(in_range("limits.http_connections", c.limits.http_connections, 8, 60000));
    DT_RETURN_IF_ERROR(in_range("limits.http_connections_per_client",
                                c.limits.http_connections_per_client, 1,
                                c.limits.http_connections));
    return absl::OkStatus();
}

}  // namespace deltatune::daemon
