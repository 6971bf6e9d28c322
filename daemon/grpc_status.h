// The single absl::Status -> grpc::Status translation at the RPC edge. Abseil's codes are gRPC's
// codes by value, so a known failure never becomes UNKNOWN; the reason a message starts with
// ("INVALID_CONFIG: ...") also travels as a google.rpc.ErrorInfo in the status details, so
// clients branch on it without parsing the message.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace deltatune::daemon {

// The reason of a message "REASON: ..." (upper case, digits, underscores), else the code's name.
std::string error_reason(const absl::Status& s);

// A status message's most bytes at the RPC edge: longer ones (an oversized id echoed back) are
// cut at a character boundary and say how much was cut.
inline constexpr size_t kMaxErrorMessageBytes = 2048;
std::string bounded_message(absl::string_view message);

grpc::Status ToGrpcStatus(const absl::Status& s);

// Ends a unary callback RPC with `s` translated by ToGrpcStatus; returns its reactor.
grpc::ServerUnaryReactor* finish_unary(grpc::CallbackServerContext* ctx, const absl::Status& s);

}  // namespace deltatune::daemon
