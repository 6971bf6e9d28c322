#include "daemon/grpc_status.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
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

std::string bounded_message(absl::string_view message) {
    if (message.size() <= kMaxErrorMessageBytes) return std::string(message);
    size_t keep = kMaxErrorMessageBytes;
    // Cut at a character boundary: never half a UTF-8 sequence.
    while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80) --keep;
    return absl::StrCat(message.substr(0, keep), "... (", message.size() - keep, " bytes cut)");
}

grpc::Status ToGrpcStatus(const absl::Status& s) {
    if (s.ok()) return grpc::Status::OK;
    // What a client sent may be echoed in the message: bounded, so the status still fits the
    // response's headers and arrives with its own code.
    const std::string message = bounded_message(s.message());
    google::rpc::Status details;
    details.set_code(static_cast<int>(s.code()));
    details.set_message(message);
    google::rpc::ErrorInfo info;
    info.set_reason(error_reason(s));
    info.set_domain("deltatune");
    details.add_details()->PackFrom(info);
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()), message,
                        details.SerializeAsString());
}

grpc::ServerUnaryReactor* finish_unary(grpc::CallbackServerContext* ctx, const absl::Status& s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
}

}  // namespace deltatune::daemon
