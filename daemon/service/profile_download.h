// DownloadProfile's stream: a profile file sent in pieces of at most 1 MiB, each read when the
// client has taken the one before, so a call holds one piece whatever the trace's size.
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "daemon/jobs/job_manager.h"
#include "deltatune/v1/service.pb.h"

namespace deltatune::daemon {

class ProfileDownload : public grpc::ServerWriteReactor<v1::ProfileChunk> {
  public:
    static constexpr int64_t kChunkBytes = 1 << 20;

    // Call exactly once, from any thread: sends the open file, or finishes with its error.
    void begin(absl::StatusOr<JobManager::ProfileFile> file);

    void OnWriteDone(bool ok) override;
    void OnDone() override { delete this; }

  private:
    void send_next();

    JobManager::ProfileFile file_;
    int64_t offset_ = 0;
    v1::ProfileChunk chunk_;
};

}  // namespace deltatune::daemon
