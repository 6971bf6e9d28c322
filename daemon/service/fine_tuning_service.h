// FineTuningService (service.proto) on the callback API: each handler is authenticate -> parse ->
// JobManager -> ToGrpcStatus, nothing more. Training never runs here: the manager
// only records intent and the scheduler and rank processes do the work.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/auth.h"
#include "daemon/config/daemon_config.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/service/blocking_workers.h"
#include "daemon/service/job_streams.h"
#include "daemon/service/reflection_v1.h"
#include "deltatune/v1/service.grpc.pb.h"

namespace deltatune::daemon {

class GrpcServerMetrics;  // grpc_metrics.h

// Unary methods take the request's raw bytes and parse it here: gRPC's own parsing answers a
// request that does not parse with UNIMPLEMENTED and no message (grpc/grpc#30454); parsed here it
// is INVALID_ARGUMENT with the reason. The three streams still use gRPC's parsing.
using FineTuningServiceBase = v1::FineTuningService::WithRawCallbackMethod_CreateJob<
    v1::FineTuningService::WithRawCallbackMethod_GetJob<
        v1::FineTuningService::WithRawCallbackMethod_ListJobs<
            v1::FineTuningService::WithRawCallbackMethod_CancelJob<
                v1::FineTuningService::WithRawCallbackMethod_PauseJob<
                    v1::FineTuningService::WithRawCallbackMethod_ResumeJob<
                        v1::FineTuningService::WithRawCallbackMethod_DeleteJob<
                            v1::FineTuningService::WithRawCallbackMethod_ListJobEvents<
                                v1::FineTuningService::WithRawCallbackMethod_ListCheckpoints<
                                    v1::FineTuningService::WithRawCallbackMethod_ProfileJob<
                                        v1::FineTuningService::WithRawCallbackMethod_GetProfile<
                                            v1::FineTuningService::CallbackService>>>>>>>>>>>;

// Protobuf's default is 100; no request of this API nests more than a few levels.
inline constexpr int kMaxRequestNesting = 32;
// INVALID_ARGUMENT naming the message type when `in` is not one.
absl::Status parse_request(const grpc::ByteBuffer& in, google::protobuf::Message* req);
absl::Status serialize_response(const google::protobuf::Message& resp, grpc::ByteBuffer* out);

class FineTuningService final : public FineTuningServiceBase {
  public:
    FineTuningService(JobManager* manager, Authenticator auth);
    ~FineTuningService() override;  // destroy after the server has shut down

    grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                     grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                       grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* PauseJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                       grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* ResumeJob(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* ListJobEvents(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* in,
                                            grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* ctx,
                                              const grpc::ByteBuffer* in,
                                              grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* ProfileJob(grpc::CallbackServerContext* ctx,
                                         const grpc::ByteBuffer* in,
                                         grpc::ByteBuffer* out) override;
    grpc::ServerUnaryReactor* GetProfile(grpc::CallbackServerContext* ctx,
                                         const grpc::ByteBuffer* in,
                                         grpc::ByteBuffer* out) override;
    grpc::ServerWriteReactor<v1::JobEvent>* StreamJobEvents(
        grpc::CallbackServerContext* ctx, const v1::StreamJobEventsRequest* req) override;
    grpc::ServerWriteReactor<v1::Job>* WatchJob(grpc::CallbackServerContext* ctx,
                                                const v1::WatchJobRequest* req) override;
    grpc::ServerWriteReactor<v1::ProfileChunk>* DownloadProfile(
        grpc::CallbackServerContext* ctx, const v1::GetProfileRequest* req) override;

    size_t stream_subscribers() { return hub_.size(); }
    // Served beside this service (start_public_server), living as long as it.
    ReflectionV1Service* reflection_v1() { return &reflection_v1_; }

  private:
    // auth -> parse -> fn(const Request*, Response*) -> serialize -> ToGrpcStatus.
    template <typename Request, typename Response, typename Fn>
    grpc::ServerUnaryReactor* unary(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                    grpc::ByteBuffer* out, Fn&& fn);

    // The same, with fn run on workers_: for calls that read the client's files.
    template <typename Request, typename Response, typename Fn>
    grpc::ServerUnaryReactor* offloaded(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out, Fn fn);

    JobManager* manager_;
    Authenticator auth_;
    StreamHub hub_;
    ReflectionV1Service reflection_v1_;
    BlockingWorkers workers_{4, 64};  // last: joined before the rest goes
};

// Builds and starts the public server: `service`, grpc.health.v1 (serving) and reflection
// (grpc.reflection.v1alpha from gRPC's plugin, grpc.reflection.v1 from ReflectionV1Service), TLS
// when configured, receive limit limits.max_request_bytes. `address` overrides listen.grpc;
// `*selected_port` gets the bound port (for ":0"). With `metrics` (outliving the server) every
// call is counted there. `more` are served beside it (the agents' service).
absl::StatusOr<std::unique_ptr<grpc::Server>> start_public_server(
    FineTuningService* service, const DaemonConfig& config, int* selected_port = nullptr,
    GrpcServerMetrics* metrics = nullptr, const std::vector<grpc::Service*>& more = {});

}  // namespace deltatune::daemon
