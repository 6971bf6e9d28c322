// Errors at the RPC edge carry their reason as a google.rpc.ErrorInfo (daemon/grpc_status.h).
#include <catch2/catch.hpp>

#include "daemon/grpc_status.h"
#include "google/rpc/status.pb.h"

namespace deltatune::daemon {
namespace {

TEST_CASE("a status's reason travels as ErrorInfo in the details", "[daemon]") {
    const grpc::Status s = ToGrpcStatus(absl::InvalidArgumentError(
        "INVALID_CONFIG: hyperparameters.learning_rate (-1) must be a finite number in (0, 1]"));
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    google::rpc::Status details;
    REQUIRE(details.ParseFromString(s.error_details()));
    CHECK(details.code() == 3);
    CHECK(details.message() == s.error_message());
    REQUIRE(details.details_size() == 1);
    google::rpc::ErrorInfo info;
    REQUIRE(details.details(0).UnpackTo(&info));
    CHECK(info.reason() == "INVALID_CONFIG");
    CHECK(info.domain() == "deltatune");
    // Without a REASON: prefix, the code's name.
    CHECK(error_reason(absl::NotFoundError("jobs/x not found")) == "NOT_FOUND");
    CHECK(error_reason(absl::FailedPreconditionError("Cannot pause: it is QUEUED")) ==
          "FAILED_PRECONDITION");
    CHECK(error_reason(absl::ResourceExhaustedError("MEMORY_PLAN: 2 x 130 GiB")) == "MEMORY_PLAN");
    CHECK(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST_CASE("an echoed oversized id is cut, the code kept", "[daemon]") {
    const std::string id(100 << 10, 'x');
    const grpc::Status s = ToGrpcStatus(absl::NotFoundError("profile " + id + " not found"));
    CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK(s.error_message().size() < kMaxErrorMessageBytes + 64);
    CHECK(s.error_message().ends_with(" bytes cut)"));
    // Never half a character: 2047 ASCII bytes, then two-byte characters.
    const std::string utf8 = std::string(kMaxErrorMessageBytes - 1, 'a') + "\u00e9\u00e9\u00e9";
    CHECK(bounded_message(utf8).starts_with(std::string(kMaxErrorMessageBytes - 1, 'a') + "..."));
    CHECK(bounded_message("short") == "short");
}

}  // namespace
}  // namespace deltatune::daemon
