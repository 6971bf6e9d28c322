// The single absl::Status -> grpc::Status translation at the RPC edge. Abseil's codes
// are gRPC's codes by value, so this is a static_cast: a known failure never becomes UNKNOWN.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace deltatune::daemon {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
    if (s.ok()) return grpc::Status::OK;
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace deltatune::daemon
