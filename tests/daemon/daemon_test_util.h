// Daemon test fixture: a temporary tree (state_dir and model/data/output roots), an in-process
// deltatuned (JobManager, rank socket, FineTuningService on an ephemeral loopback port) whose
// ranks are tests/daemon/fake_rank.cc, and a gRPC client with deadlines on every call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "daemon/config/daemon_config.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/rank/rank_socket.h"
#include "daemon/service/fine_tuning_service.h"
#include "daemon/service/rank_service.h"
#include "deltatune/v1/service.grpc.pb.h"
#include "tests/common/test_util.h"

namespace deltatune::daemon::testing {

using deltatune::testing::TempDir;
using v1::Job;

inline std::string fake_rank_path() {
    return deltatune::testing::tree_dir("DELTATUNE_BINARY_DIR", DT_BINARY_DIR) +
           "/daemon/deltatune_fake_rank";
}

// Model, data and output roots with one model folder ("tiny") and one data file ("train.jsonl").
inline DaemonConfig test_config(const TempDir& dir) {
    namespace fs = std::filesystem;
    DaemonConfig c;
    c.grpc_address = "127.0.0.1:0";
    c.state_dir = dir.file("state");
    c.roots.models = {dir.file("models")};
    c.roots.data = {dir.file("data")};
    c.roots.outputs = {dir.file("outputs")};
    fs::create_directories(dir.file("models/tiny"));
    fs::create_directories(dir.file("outputs"));
    std::ofstream(dir.file("models/tiny/config.json")) << "{}";
    fs::create_directories(dir.file("data"));
    std::ofstream(dir.file("data/train.jsonl")) << "{\"messages\": []}\n";
    c.rank_executable = fake_rank_path();
    c.heartbeat_timeout_seconds = 5;
    c.rank_term_grace_seconds = 0.5;
    c.shutdown_grace_seconds = 5;
    return c;
}

// A job for the fake rank: `mode` is its behaviour (fake_rank.cc), output_dir is per job.
inline v1::JobSpec fake_spec(const std::string& output, const std::string& mode = "train",
                             int64_t max_steps = 1000000) {
    v1::JobSpec s;
    s.set_model("tiny");
    s.mutable_data()->add_train_files("train.jsonl");
    s.set_output_dir(output);
    s.mutable_hyperparameters()->set_max_steps(max_steps);
    (*s.mutable_labels())["fake_rank"] = mode;
    (*s.mutable_labels())["fake_interval_ms"] = "20";
    return s;
}

class TestDaemon {
  public:
    // Starts at once unless `start` is false (then jobs stay QUEUED: no scheduler).
    explicit TestDaemon(DaemonConfig config, bool start = true,
                        std::vector<std::string> tokens = {})
        : config_(std::move(config)) {
        auto m = JobManager::open(job_manager_options(config_));
        if (!m.ok()) throw std::runtime_error(std::string(m.status().message()));
        manager_ = std::move(*m);
        rank_service_ = std::make_unique<RankServiceImpl>(manager_.get());
        auto rs = start_rank_server(rank_service_.get(), config_.state_dir + "/rank.sock");
        if (!rs.ok()) throw std::runtime_error(std::string(rs.status().message()));
        rank_server_ = std::move(*rs);
        if (start) manager_->start();
        Authenticator auth =
            tokens.empty() ? Authenticator() : Authenticator::with_tokens(std::move(tokens));
        service_ = std::make_unique<FineTuningService>(manager_.get(), std::move(auth));
        auto server = start_public_server(service_.get(), config_, &port_);
        if (!server.ok()) throw std::runtime_error(std::string(server.status().message()));
        server_ = std::move(*server);
        channel_ = grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
        stub_ = v1::FineTuningService::NewStub(channel_);
    }
    ~TestDaemon() { stop(std::chrono::milliseconds(0)); }

    // Graceful daemon shutdown (what SIGTERM does).
    void stop(std::chrono::milliseconds grace) {
        if (!manager_) return;
        manager_->shutdown(grace);
        teardown();
    }
    // As if the daemon process died: ranks keep running, the store is left as it is.
    void crash() {
        manager_->abandon_for_test();
        teardown();
    }

    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
    std::shared_ptr<grpc::Channel> channel() { return channel_; }
    v1::FineTuningService::Stub& stub() { return *stub_; }
    JobManager& manager() { return *manager_; }
    const DaemonConfig& config() const { return config_; }

  private:
    void teardown() {
        server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
        rank_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
        server_.reset();
        service_.reset();
        rank_server_.reset();
        manager_.reset();
    }

    DaemonConfig config_;
    int port_ = 0;
    std::unique_ptr<JobManager> manager_;
    std::unique_ptr<RankServiceImpl> rank_service_;
    std::unique_ptr<grpc::Server> rank_server_;
    std::unique_ptr<FineTuningService> service_;
    std::unique_ptr<grpc::Server> server_;
    std::shared_ptr<grpc::Channel> channel_;
    std::unique_ptr<v1::FineTuningService::Stub> stub_;
};

// A client context with a deadline and, optionally, a bearer token.
inline std::unique_ptr<grpc::ClientContext> ctx(const std::string& token = "", int seconds = 10) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
    if (!token.empty()) c->AddMetadata("authorization", "Bearer " + token);
    return c;
}

inline grpc::Status create(TestDaemon& d, const v1::JobSpec& spec, Job* out,
                           const std::string& request_id = "") {
    v1::CreateJobRequest req;
    *req.mutable_spec() = spec;
    req.set_request_id(request_id);
    return d.stub().CreateJob(ctx().get(), req, out);
}

inline Job get(TestDaemon& d, const std::string& name) {
    v1::GetJobRequest req;
    req.set_name(name);
    Job job;
    const grpc::Status s = d.stub().GetJob(ctx().get(), req, &job);
    if (!s.ok()) throw std::runtime_error("GetJob " + name + ": " + s.error_message());
    return job;
}

// Polls GetJob until `pred` holds or `seconds` pass; returns the last Job seen.
inline Job wait_for(TestDaemon& d, const std::string& name, std::function<bool(const Job&)> pred,
                    double seconds = 10) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
    Job job = get(d, name);
    while (!pred(job) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        job = get(d, name);
    }
    return job;
}

inline Job wait_state(TestDaemon& d, const std::string& name, Job::State state,
                      double seconds = 10) {
    return wait_for(
        d, name, [state](const Job& j) { return j.state() == state; }, seconds);
}

// Every event of a job, through ListJobEvents pages.
inline std::vector<v1::JobEvent> all_events(TestDaemon& d, const std::string& name,
                                            const std::string& type = "") {
    std::vector<v1::JobEvent> out;
    v1::ListJobEventsRequest req;
    req.set_name(name);
    req.set_type(type);
    req.set_page_size(1000);
    v1::ListJobEventsResponse resp;
    do {
        resp.Clear();
        if (!d.stub().ListJobEvents(ctx().get(), req, &resp).ok()) break;
        out.insert(out.end(), resp.events().begin(), resp.events().end());
        req.set_page_token(resp.next_page_token());
    } while (!resp.next_page_token().empty());
    return out;
}

}  // namespace deltatune::daemon::testing
