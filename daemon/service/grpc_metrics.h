// Prometheus counters of the public gRPC server's calls, named as the grpc_server_* family that
// client libraries and dashboards already know: calls started and handled by service, method and
// type, handled by status code, and the handling time as a histogram. A server interceptor feeds
// them; /metrics renders them.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace deltatune::daemon {

class GrpcServerMetrics {
  public:
    // For grpc::ServerBuilder::experimental().SetInterceptorCreators: every call of the server.
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> interceptor_factory();

    // "/deltatune.v1.FineTuningService/GetJob" and its kind ("unary", "server_stream", ...).
    void started(const std::string& full_method, const char* type);
    void handled(const std::string& full_method, const char* type, grpc::StatusCode code,
                 double seconds);
    // The exposition text of the family (HELP and TYPE lines included).
    std::string render() const;

  private:
    using Call = std::tuple<std::string, std::string, std::string>;  // service, method, type
    static constexpr std::array<double, 9> kBuckets = {0.001, 0.005, 0.01, 0.05, 0.1,
                                                       0.5,   1,     5,    30};
    struct Timing {
        std::array<int64_t, kBuckets.size()> buckets{};
        int64_t count = 0;
        double sum = 0;
    };
    mutable std::mutex mu_;
    std::map<Call, int64_t> started_;
    std::map<std::pair<Call, std::string>, int64_t> handled_;  // by status code name
    std::map<Call, Timing> seconds_;
};

}  // namespace deltatune::daemon
