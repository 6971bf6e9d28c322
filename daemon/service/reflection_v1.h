// grpc.reflection.v1 (what current grpcurl, Postman and grpcui ask first) beside gRPC's own
// v1alpha plugin: the same answers, from the process's generated descriptor pool.
#pragma once

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace deltatune::daemon {

class ReflectionV1Service final : public grpc::reflection::v1::ServerReflection::Service {
  public:
    // `services`: the full names list_services reports (the server's services).
    explicit ReflectionV1Service(std::vector<std::string> services)
        : services_(std::move(services)) {}

    grpc::Status ServerReflectionInfo(
        grpc::ServerContext* ctx,
        grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                                 grpc::reflection::v1::ServerReflectionRequest>* stream) override;

    // One request's response (what the stream writes back for it).
    grpc::reflection::v1::ServerReflectionResponse answer(
        const grpc::reflection::v1::ServerReflectionRequest& req) const;

  private:
    std::vector<std::string> services_;
};

}  // namespace deltatune::daemon
