#include "daemon/service/profile_download.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/grpc_status.h"

namespace deltatune::daemon {

void ProfileDownload::begin(absl::StatusOr<JobManager::ProfileFile> file) {
    if (!file.ok()) return Finish(ToGrpcStatus(file.status()));
    file_ = std::move(*file);
    send_next();
}

void ProfileDownload::OnWriteDone(bool ok) {
    if (!ok) return Finish(grpc::Status::CANCELLED);  // the client went away
    send_next();
}

void ProfileDownload::send_next() {
    if (offset_ == file_.bytes) return Finish(grpc::Status::OK);
    const int64_t n = std::min(kChunkBytes, file_.bytes - offset_);
    std::string& data = *chunk_.mutable_data();
    data.resize(static_cast<size_t>(n));
    for (int64_t done = 0; done < n;) {
        const ssize_t got = ::pread(file_.fd.get(), data.data() + done,
                                    static_cast<size_t>(n - done), offset_ + done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {  // an error, or the file shrank under us
            return Finish(ToGrpcStatus(absl::DataLossError(
                absl::StrCat(file_.path, ": read at byte ", offset_ + done, " failed (",
                             got < 0 ? std::strerror(errno) : "the file shrank", ")"))));
        }
        done += got;
    }
    chunk_.set_offset(offset_);
    chunk_.set_total_bytes(file_.bytes);
    offset_ += n;
    StartWrite(&chunk_);
}

}  // namespace deltatune::daemon
