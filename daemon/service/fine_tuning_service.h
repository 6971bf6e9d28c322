// FineTuningService (service.proto) on the callback API: each handler is authenticate -> parse ->
// JobManager -> ToGrpcStatus, nothing more (style.md R12). Training never runs here: the manager
// only records intent and the scheduler and rank processes do the work.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/config/daemon_config.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/service/auth.h"
#include "daemon/service/job_streams.h"
#include "deltatune/v1/service.grpc.pb.h"

namespace deltatune::daemon {

class FineTuningService final : public v1::FineTuningService::CallbackService {
  public:
    FineTuningService(JobManager* manager, Authenticator auth);
    ~FineTuningService() override;  // destroy after the server has shut down

    grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx,
                                        const v1::CreateJobRequest* req, v1::Job* resp) override;
    grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                     v1::Job* resp) override;
    grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                       const v1::ListJobsRequest* req,
                                       v1::ListJobsResponse* resp) override;
    grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                        const v1::CancelJobRequest* req, v1::Job* resp) override;
    grpc::ServerUnaryReactor* PauseJob(grpc::CallbackServerContext* ctx,
                                       const v1::PauseJobRequest* req, v1::Job* resp) override;
    grpc::ServerUnaryReactor* ResumeJob(grpc::CallbackServerContext* ctx,
                                        const v1::ResumeJobRequest* req, v1::Job* resp) override;
    grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                        const v1::DeleteJobRequest* req,
                                        google::protobuf::Empty* resp) override;
    grpc::ServerUnaryReactor* ListJobEvents(grpc::CallbackServerContext* ctx,
                                            const v1::ListJobEventsRequest* req,
                                            v1::ListJobEventsResponse* resp) override;
    grpc::ServerWriteReactor<v1::JobEvent>* StreamJobEvents(
        grpc::CallbackServerContext* ctx, const v1::StreamJobEventsRequest* req) override;
    grpc::ServerWriteReactor<v1::Job>* WatchJob(grpc::CallbackServerContext* ctx,
                                                const v1::WatchJobRequest* req) override;
    grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* ctx,
                                              const v1::ListCheckpointsRequest* req,
                                              v1::ListCheckpointsResponse* resp) override;

    size_t stream_subscribers() { return hub_.size(); }

  private:
    template <typename Fn>
    grpc::ServerUnaryReactor* unary(grpc::CallbackServerContext* ctx, Fn&& fn);

    JobManager* manager_;
    Authenticator auth_;
    StreamHub hub_;
};

// Builds and starts the public server: `service`, grpc.health.v1 (serving) and reflection, TLS
// when configured, receive limit limits.max_request_bytes. `address` overrides listen.grpc;
// `*selected_port` gets the bound port (for ":0").
absl::StatusOr<std::unique_ptr<grpc::Server>> start_public_server(FineTuningService* service,
                                                                  const DaemonConfig& config,
                                                                  int* selected_port = nullptr);

}  // namespace deltatune::daemon
