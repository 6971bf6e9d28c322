// The rank socket server. Reports are small and JobManager applies them without blocking on
// ranks, so handling them inline on the callback thread is fine.
#include "daemon/jobs/rank_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "daemon/grpc_status.h"

namespace deltatune::daemon {

grpc::ServerUnaryReactor* RankServiceImpl::Report(grpc::CallbackServerContext* ctx,
                                                  const v1::RankReport* request,
                                                  v1::RankDirective* response) {
    *response = manager_->on_rank_report(*request);
    return finish_unary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* RankServiceImpl::StoreSet(grpc::CallbackServerContext* ctx,
                                                    const v1::StoreSetRequest* request,
                                                    v1::StoreSetResponse*) {
    return finish_unary(ctx, manager_->store_set(request->job(), request->attempt(), request->key(),
                                                 request->value()));
}

grpc::ServerUnaryReactor* RankServiceImpl::StoreGet(grpc::CallbackServerContext* ctx,
                                                    const v1::StoreGetRequest* request,
                                                    v1::StoreGetResponse* response) {
    auto value = manager_->store_get(request->job(), request->attempt(), request->key());
    if (value.ok() && value->has_value()) {
        response->set_found(true);
        response->set_value(**value);
    }
    return finish_unary(ctx, value.status());
}

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
