// The rank socket: where a machine's ranks reach their supervisor (rank.proto) over a unix
// socket only the daemon's user can open. The supervisor serves its RankService there
// (service/rank_service.h); a node agent serves its relay (agents/rank_relay.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace deltatune::daemon {

// Starts a server for `service` on the unix socket at `socket_path` (a stale socket file is
// replaced; mode 0600). The path must fit sockaddr_un (107 bytes).
absl::StatusOr<std::unique_ptr<grpc::Server>> start_rank_server(grpc::Service* service,
                                                                const std::string& socket_path);

}  // namespace deltatune::daemon
