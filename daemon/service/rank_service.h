// RankService: the supervisor end of the rank protocol (rank.proto), served on the local unix
// socket <state_dir>/rank.sock (mode 0600: only the daemon's user can report). Each RankReport
// is applied to the job by JobManager and answered with the rank's next RankDirective.
#pragma once

#include <grpcpp/grpcpp.h>

#include "daemon/jobs/job_manager.h"
#include "deltatune/v1/rank.grpc.pb.h"

namespace deltatune::daemon {

class RankServiceImpl final : public v1::RankService::CallbackService {
  public:
    explicit RankServiceImpl(JobManager* manager) : manager_(manager) {}
    grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                     const v1::RankReport* request,
                                     v1::RankDirective* response) override;
    grpc::ServerUnaryReactor* StoreSet(grpc::CallbackServerContext* ctx,
                                       const v1::StoreSetRequest* request,
                                       v1::StoreSetResponse* response) override;
    grpc::ServerUnaryReactor* StoreGet(grpc::CallbackServerContext* ctx,
                                       const v1::StoreGetRequest* request,
                                       v1::StoreGetResponse* response) override;

  private:
    JobManager* manager_;
};

}  // namespace deltatune::daemon
