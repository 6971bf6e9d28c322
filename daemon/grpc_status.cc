#include "daemon/grpc_status.h"

#include "absl/strings/ascii.h"
#include "google/rpc/status.pb.h"

namespace deltatune::daemon {

std::string error_reason(const absl::Status& s) {
    const std::string m(s.message());
    const size_t colon = m.find(": ");
    if (colon != std::string::npos && colon > 0) {
        const std::string head = m.substr(0, colon);
        bool reason = absl::ascii_isupper(static_cast<unsigned char>(head[0]));
        for (const char c : head) {
            reason &= absl::ascii_isupper(static_cast<unsigned char>(c)) ||
                      absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '_';
        }
        if (reason) return head;
    }
    return absl::StatusCodeToString(s.code());  // "INVALID_ARGUMENT", ...
}

grpc::Status ToGrpcStatus(const absl::Status& s) {
    if (s.ok()) return grpc::Status::OK;
    google::rpc::Status details;
    details.set_code(static_cast<int>(s.code()));
    details.set_message(std::string(s.message()));
    google::rpc::ErrorInfo info;
    info.set_reason(error_reason(s));
    info.set_domain("deltatune");
    details.add_details()->PackFrom(info);
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()),
                        details.SerializeAsString());
}

grpc::ServerUnaryReactor* finish_unary(grpc::CallbackServerContext* ctx, const absl::Status& s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
}

}  // namespace deltatune::daemon
