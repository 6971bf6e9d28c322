#include "daemon/service/grpc_metrics.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "daemon/service/metrics_text.h"

namespace deltatune::daemon {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::ServerRpcInfo;

const char* type_name(ServerRpcInfo::Type t) {
    switch (t) {
        case ServerRpcInfo::Type::UNARY:
            return "unary";
        case ServerRpcInfo::Type::CLIENT_STREAMING:
            return "client_stream";
        case ServerRpcInfo::Type::SERVER_STREAMING:
            return "server_stream";
        case ServerRpcInfo::Type::BIDI_STREAMING:
            return "bidi_stream";
    }
    return "unknown";
}

const char* code_name(grpc::StatusCode c) {
    static const char* const kNames[] = {
        "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
        "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
        "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
        "DataLoss", "Unauthenticated"};
    const int i = static_cast<int>(c);
    return i >= 0 && i < 17 ? kNames[i] : "Unknown";
}

// Counts the call at its start and when its status goes out.
class CallInterceptor : public grpc::experimental::Interceptor {
  public:
    CallInterceptor(GrpcServerMetrics* metrics, ServerRpcInfo* info)
        : metrics_(metrics),
          method_(info->method()),
          type_(type_name(info->type())),
          start_(std::chrono::steady_clock::now()) {
        metrics_->started(method_, type_);
    }
    void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
        if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
            const double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
            metrics_->handled(method_, type_, methods->GetSendStatus().error_code(), seconds);
        }
        methods->Proceed();
    }

  private:
    GrpcServerMetrics* metrics_;
    std::string method_;
    const char* type_;
    std::chrono::steady_clock::time_point start_;
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
  public:
    explicit Factory(GrpcServerMetrics* metrics) : metrics_(metrics) {}
    grpc::experimental::Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
        return new CallInterceptor(metrics_, info);
    }

  private:
    GrpcServerMetrics* metrics_;
};

// "/pkg.Service/Method" -> ("pkg.Service", "Method").
std::pair<std::string, std::string> split_method(const std::string& full) {
    const size_t slash = full.rfind('/');
    if (slash == std::string::npos || slash == 0) return {"unknown", full};
    return {full.substr(1, slash - 1), full.substr(slash + 1)};
}

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
GrpcServerMetrics::interceptor_factory() {
    return std::make_unique<Factory>(this);
}

void GrpcServerMetrics::started(const std::string& full_method, const char* type) {
    auto [service, method] = split_method(full_method);
    std::lock_guard<std::mutex> lock(mu_);
    ++started_[{service, method, type}];
}

void GrpcServerMetrics::handled(const std::string& full_method, const char* type,
                                grpc::StatusCode code, double seconds) {
    auto [service, method] = split_method(full_method);
    const Call call{service, method, type};
    std::lock_guard<std::mutex> lock(mu_);
    ++handled_[{call, code_name(code)}];
    Timing& t = seconds_[call];
    for (size_t i = 0; i < kBuckets.size(); ++i) t.buckets[i] += seconds <= kBuckets[i];
    ++t.count;
    t.sum += seconds;
}

std::string GrpcServerMetrics::render() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    auto labels = [](const Call& c) {
        return absl::StrCat("grpc_service=\"", metric_label(std::get<0>(c)), "\",grpc_method=\"",
                            metric_label(std::get<1>(c)), "\",grpc_type=\"", std::get<2>(c), "\"");
    };
    absl::StrAppend(&out, "# HELP grpc_server_started_total RPCs started on the server.\n",
                    "# TYPE grpc_server_started_total counter\n");
    for (const auto& [call, n] : started_) {
        absl::StrAppend(&out, "grpc_server_started_total{", labels(call), "} ", n, "\n");
    }
    absl::StrAppend(&out,
                    "# HELP grpc_server_handled_total RPCs completed on the server, by status "
                    "code.\n# TYPE grpc_server_handled_total counter\n");
    for (const auto& [key, n] : handled_) {
        absl::StrAppend(&out, "grpc_server_handled_total{", labels(key.first), ",grpc_code=\"",
                        key.second, "\"} ", n, "\n");
    }
    absl::StrAppend(
        &out,
        "# HELP grpc_server_handling_seconds Time from an RPC's start to its status "
        "(streams: their whole life).\n# TYPE grpc_server_handling_seconds histogram\n");
    for (const auto& [call, t] : seconds_) {
        const std::string l = labels(call);
        for (size_t i = 0; i < kBuckets.size(); ++i) {
            absl::StrAppend(&out, "grpc_server_handling_seconds_bucket{", l, ",le=\"",
                            metric_number(kBuckets[i]), "\"} ", t.buckets[i], "\n");
        }
        absl::StrAppend(&out, "grpc_server_handling_seconds_bucket{", l, ",le=\"+Inf\"} ", t.count,
                        "\n", "grpc_server_handling_seconds_sum{", l, "} ", metric_number(t.sum),
                        "\n", "grpc_server_handling_seconds_count{", l, "} ", t.count, "\n");
    }
    return out;
}

}  // namespace deltatune::daemon
