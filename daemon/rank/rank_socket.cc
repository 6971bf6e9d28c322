// The rank socket's server.
#include "daemon/rank/rank_socket.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace deltatune::daemon {

absl::StatusOr<std::unique_ptr<grpc::Server>> start_rank_server(grpc::Service* service,
                                                                const std::string& socket_path) {
    if (socket_path.size() > 107) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank socket ", socket_path, " is longer than 107 bytes; use a shorter state_dir"));
    }
    ::unlink(socket_path.c_str());
    // The socket is created with the umask's mode; tighten it so no other user can bind-race or
    // talk to it between creation and the chmod below.
    const mode_t old_mask = ::umask(077);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
    builder.RegisterService(service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ::umask(old_mask);
    if (!server) return absl::UnavailableError("cannot listen on unix:" + socket_path);
    ::chmod(socket_path.c_str(), 0600);
    return server;
}

}  // namespace deltatune::daemon
