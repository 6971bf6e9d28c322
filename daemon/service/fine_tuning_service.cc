// Thin FineTuningService handlers: every error reaches the client with its own code through
// ToGrpcStatus, never UNKNOWN.
#include "daemon/service/fine_tuning_service.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "daemon/grpc_status.h"
#include "daemon/service/grpc_metrics.h"
#include "daemon/service/profile_download.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

// What a call hears when the file workers' queue is full (offloaded calls, DownloadProfile).
constexpr char kWorkersBusy[] =
    "the daemon is busy checking other submissions' files; retry shortly";

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials(const DaemonConfig& c) {
    if (c.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
    grpc::SslServerCredentialsOptions opts;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    DT_ASSIGN_OR_RETURN(pair.private_key, read_tls_file(c.tls_key_file));
    DT_ASSIGN_OR_RETURN(pair.cert_chain, read_tls_file(c.tls_cert_file));
    opts.pem_key_cert_pairs.push_back(std::move(pair));
    return grpc::SslServerCredentials(opts);
}

}  // namespace

absl::Status parse_request(const grpc::ByteBuffer& in, google::protobuf::Message* req) {
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (in.Dump(&slices).ok()) {
        for (const grpc::Slice& s : slices) {
            bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
        }
    }
    google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                  static_cast<int>(bytes.size()));
    stream.SetRecursionLimit(kMaxRequestNesting);
    if (!req->ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the request (", bytes.size(), " bytes) is not a valid ",
            req->GetDescriptor()->full_name(),
            ": broken wire format, a string field that is not UTF-8, or messages nested deeper "
            "than ",
            kMaxRequestNesting));
    }
    return absl::OkStatus();
}

absl::Status serialize_response(const google::protobuf::Message& resp, grpc::ByteBuffer* out) {
    const std::string bytes = resp.SerializeAsString();
    grpc::Slice slice(bytes);
    *out = grpc::ByteBuffer(&slice, 1);
    return absl::OkStatus();
}

FineTuningService::FineTuningService(JobManager* manager, Authenticator auth)
    : manager_(manager),
      auth_(std::move(auth)),
      hub_(manager),
      reflection_v1_({v1::FineTuningService::service_full_name(), "grpc.health.v1.Health",
                      "grpc.reflection.v1alpha.ServerReflection",
                      grpc::reflection::v1::ServerReflection::service_full_name()}) {}

FineTuningService::~FineTuningService() = default;

template <typename Request, typename Response, typename Fn>
grpc::ServerUnaryReactor* FineTuningService::unary(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* in,
                                                   grpc::ByteBuffer* out, Fn&& fn) {
    absl::Status s = auth_.check(*ctx);
    Request req;
    Response resp;
    if (s.ok()) s = parse_request(*in, &req);
    if (s.ok()) s = fn(&req, &resp);
    if (s.ok()) s = serialize_response(resp, out);
    return finish_unary(ctx, s);
}

template <typename Request, typename Response, typename Fn>
grpc::ServerUnaryReactor* FineTuningService::offloaded(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in,
                                                       grpc::ByteBuffer* out, Fn fn) {
    absl::Status s = auth_.check(*ctx);
    auto req = std::make_shared<Request>();
    if (s.ok()) s = parse_request(*in, req.get());
    if (!s.ok()) return finish_unary(ctx, s);
    // The call stays open (its response buffer with it) until Finish, whoever calls it.
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    const bool queued = workers_.run([req, out, reactor, fn = std::move(fn)] {
        Response resp;
        absl::Status st = fn(req.get(), &resp);
        if (st.ok()) st = serialize_response(resp, out);
        reactor->Finish(ToGrpcStatus(st));
    });
    if (!queued) {
        reactor->Finish(ToGrpcStatus(absl::UnavailableError(kWorkersBusy)));
    }
    return reactor;
}

grpc::ServerUnaryReactor* FineTuningService::CreateJob(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in,
                                                       grpc::ByteBuffer* out) {
    // A submission reads and stats the client's files: off the gRPC threads.
    return offloaded<v1::CreateJobRequest, v1::Job>(
        ctx, in, out, [this](const v1::CreateJobRequest* req, v1::Job* resp) -> absl::Status {
            DT_ASSIGN_OR_RETURN(
                *resp, manager_->create_job(req->spec(), req->request_id(), req->validate_only()));
            return absl::OkStatus();
        });
}

grpc::ServerUnaryReactor* FineTuningService::GetJob(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
    return unary<v1::GetJobRequest, v1::Job>(
        ctx, in, out, [&](const v1::GetJobRequest* req, v1::Job* resp) -> absl::Status {
            DT_ASSIGN_OR_RETURN(*resp, manager_->get_job(req->name()));
            return absl::OkStatus();
        });
}

grpc::ServerUnaryReactor* FineTuningService::ListJobs(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
    return unary<v1::ListJobsRequest, v1::ListJobsResponse>(
        ctx, in, out,
        [&](const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) -> absl::Status {
            JobManager::ListRequest q;
            q.page_size = req->page_size();
            q.page_token = req->page_token();
            q.state = req->state();
            q.labels.insert(req->labels().begin(), req->labels().end());
            DT_ASSIGN_OR_RETURN(JobManager::ListResult r, manager_->list_jobs(q));
            for (v1::Job& j : r.jobs) *resp->add_jobs() = std::move(j);
            resp->set_next_page_token(r.next_page_token);
            return absl::OkStatus();
        });
}

grpc::ServerUnaryReactor* FineTuningService::CancelJob(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in,
                                                       grpc::ByteBuffer* out) {
    return unary<v1::CancelJobRequest, v1::Job>(
        ctx, in, out, [&](const v1::CancelJobRequest* req, v1::Job* resp) -> absl::Status {
            DT_ASSIGN_OR_RETURN(*resp, manager_->cancel_job(req->name()));
            return absl::OkStatus();
        });
}

grpc::ServerUnaryReactor* FineTuningService::PauseJob(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
    return unary<v1::PauseJobRequest, v1::Job>(
        ctx, in, out, [&](const v1::PauseJobRequest* req, v1::Job* resp) -> absl::Status {
            DT_ASSIGN_OR_RETURN(*resp, manager_->pause_job(req->name()));
            return absl::OkStatus();
        });
}

grpc::ServerUnaryReactor* FineTuningService::ResumeJob(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in,
                                                       grpc::ByteBuffer* out) {
    return unary<v1::ResumeJobRequest, v1::Job>(
        ctx, in, out, [&](const v1::ResumeJobRequest* req, v1::Job* resp) -> absl::Status {
            DT_ASSIGN_OR_RETURN(*resp, manager_->resume_job(req->name()));
            return absl::OkStatus();
        });
}

grpc::ServerUnaryReactor* FineTuningService::DeleteJob(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in,
                                                       grpc::ByteBuffer* out) {
    return unary<v1::DeleteJobRequest, google::protobuf::Empty>(
        ctx, in, out, [&](const v1::DeleteJobRequest* req, google::protobuf::Empty* resp) {
            return manager_->delete_job(req->name());
        });
}

grpc::ServerUnaryReactor* FineTuningService::ListJobEvents(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* in,
                                                           grpc::ByteBuffer* out) {
    return unary<v1::ListJobEventsRequest, v1::ListJobEventsResponse>(
        ctx, in, out,
        [&](const v1::ListJobEventsRequest* req, v1::ListJobEventsResponse* resp) -> absl::Status {
            JobManager::EventsRequest q{req->name(), req->page_size(), req->page_token(),
                                        req->min_sequence(), req->type()};
            DT_ASSIGN_OR_RETURN(JobManager::EventsResult r, manager_->list_events(q));
            for (v1::JobEvent& e : r.events) *resp->add_events() = std::move(e);
            resp->set_next_page_token(r.next_page_token);
            return absl::OkStatus();
        });
}

grpc::ServerUnaryReactor* FineTuningService::ListCheckpoints(grpc::CallbackServerContext* ctx,
                                                             const grpc::ByteBuffer* in,
                                                             grpc::ByteBuffer* out) {
    return unary<v1::ListCheckpointsRequest, v1::ListCheckpointsResponse>(
        ctx, in, out,
        [&](const v1::ListCheckpointsRequest* req,
            v1::ListCheckpointsResponse* resp) -> absl::Status {
            DT_ASSIGN_OR_RETURN(
                JobManager::CheckpointsResult page,
                manager_->list_checkpoints(req->name(), req->page_size(), req->page_token()));
            for (v1::Checkpoint& c : page.checkpoints) *resp->add_checkpoints() = std::move(c);
            resp->set_next_page_token(page.next_page_token);
            return absl::OkStatus();
        });
}

grpc::ServerUnaryReactor* FineTuningService::ProfileJob(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* in,
                                                        grpc::ByteBuffer* out) {
    return unary<v1::ProfileJobRequest, v1::ProfileJobResponse>(
        ctx, in, out,
        [&](const v1::ProfileJobRequest* req, v1::ProfileJobResponse* resp) -> absl::Status {
            DT_ASSIGN_OR_RETURN(*resp->mutable_profile_id(),
                                manager_->request_profile(req->name(), req->steps()));
            return absl::OkStatus();
        });
}

grpc::ServerUnaryReactor* FineTuningService::GetProfile(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* in,
                                                        grpc::ByteBuffer* out) {
    return offloaded<v1::GetProfileRequest, v1::Profile>(  // reads a profile file
        ctx, in, out, [this](const v1::GetProfileRequest* req, v1::Profile* resp) -> absl::Status {
            DT_ASSIGN_OR_RETURN(*resp, manager_->get_profile(req->name(), req->profile_id()));
            return absl::OkStatus();
        });
}

grpc::ServerWriteReactor<v1::JobEvent>* FineTuningService::StreamJobEvents(
    grpc::CallbackServerContext* ctx, const v1::StreamJobEventsRequest* req) {
    absl::Status s = auth_.check(*ctx);
    if (s.ok() && (req->heartbeat_seconds() < 0 || req->heartbeat_seconds() > 3600)) {
        s = absl::InvalidArgumentError(absl::StrCat("heartbeat_seconds (", req->heartbeat_seconds(),
                                                    ") must be in [0, 3600]"));
    }
    if (s.ok()) s = manager_->cursor(req->name()).status();
    if (!s.ok()) return failed_stream<v1::JobEvent>(ToGrpcStatus(s));
    const int seconds = req->heartbeat_seconds() == 0 ? 15 : req->heartbeat_seconds();
    return start_event_stream(manager_, &hub_, req->name(), req->since_sequence(),
                              std::chrono::seconds(seconds));
}

grpc::ServerWriteReactor<v1::Job>* FineTuningService::WatchJob(grpc::CallbackServerContext* ctx,
                                                               const v1::WatchJobRequest* req) {
    absl::Status s = auth_.check(*ctx);
    if (s.ok()) s = manager_->cursor(req->name()).status();
    if (!s.ok()) return failed_stream<v1::Job>(ToGrpcStatus(s));
    return start_job_watch(manager_, &hub_, req->name());
}

grpc::ServerWriteReactor<v1::ProfileChunk>* FineTuningService::DownloadProfile(
    grpc::CallbackServerContext* ctx, const v1::GetProfileRequest* req) {
    auto* download = new ProfileDownload();
    if (absl::Status s = auth_.check(*ctx); !s.ok()) {
        download->begin(s);
        return download;
    }
    // Finding the profile reads the job's events and opens its file: off the gRPC threads.
    const bool queued = workers_.run([this, download, name = req->name(), id = req->profile_id()] {
        download->begin(manager_->open_profile(name, id));
    });
    if (!queued) {
        download->begin(absl::UnavailableError(kWorkersBusy));
    }
    return download;
}

absl::StatusOr<std::unique_ptr<grpc::Server>> start_public_server(
    FineTuningService* service, const DaemonConfig& config, int* selected_port,
    GrpcServerMetrics* metrics, const std::vector<grpc::Service*>& more) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    DT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, credentials(config));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(config.grpc_address, creds, &port);
    builder.RegisterService(service);
    builder.RegisterService(service->reflection_v1());
    for (grpc::Service* extra : more) builder.RegisterService(extra);
    builder.SetMaxReceiveMessageSize(static_cast<int>(config.limits.max_request_bytes));
    // gRPC sets SO_REUSEPORT by default: a second daemon on the same port would bind too and the
    // kernel would split clients between the two. One port, one daemon.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    if (metrics != nullptr) {
        std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
        f.push_back(metrics->interceptor_factory());
        builder.experimental().SetInterceptorCreators(std::move(f));
    }
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server || port == 0) {
        return absl::UnavailableError(
            absl::StrCat("cannot listen on ", config.grpc_address,
                         " (is another deltatuned, or another program, serving that port?)"));
    }
    server->GetHealthCheckService()->SetServingStatus(v1::FineTuningService::service_full_name(),
                                                      true);
    if (selected_port != nullptr) *selected_port = port;
    return server;
}

}  // namespace deltatune::daemon
