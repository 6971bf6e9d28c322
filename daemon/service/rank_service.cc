// The supervisor's RankService. Reports are small and JobManager applies them without blocking
// on ranks, so handling them inline on the callback thread is fine.
#include "daemon/service/rank_service.h"

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

}  // namespace deltatune::daemon
