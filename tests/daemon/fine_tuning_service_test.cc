// FineTuningService over real gRPC on loopback: create/get/list, idempotent create, the AIP-216
// transitions (allowed and refused), event streams resumed by sequence, heartbeats, WatchJob,
// health and reflection, bearer tokens, and hostile input, after which the server still serves.
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/generic/generic_stub.h>
#include <catch2/catch.hpp>

#include <set>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "tests/daemon/daemon_test_util.h"

namespace deltatune::daemon::testing {
namespace {

using grpc::StatusCode;

// One call through the generic API (for services whose generated stubs we do not link).
grpc::Status generic_call(const std::shared_ptr<grpc::Channel>& ch, const std::string& method,
                          const std::string& request, std::string* response) {
    grpc::GenericStub stub(ch);
    grpc::CompletionQueue cq;
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto call = stub.PrepareCall(&c, method, &cq);
    void* tag;
    bool ok;
    grpc::Slice slice(request);
    grpc::ByteBuffer in(&slice, 1), out;
    grpc::Status status;
    call->StartCall(reinterpret_cast<void*>(1));
    cq.Next(&tag, &ok);
    call->Write(in, reinterpret_cast<void*>(2));
    cq.Next(&tag, &ok);
    call->WritesDone(reinterpret_cast<void*>(3));
    cq.Next(&tag, &ok);
    call->Read(&out, reinterpret_cast<void*>(4));
    cq.Next(&tag, &ok);
    if (ok) {
        std::vector<grpc::Slice> slices;
        (void)out.Dump(&slices);
        for (const auto& s : slices)
            response->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    call->Finish(&status, reinterpret_cast<void*>(5));
    cq.Next(&tag, &ok);
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
}

// Reads a StreamJobEvents stream until it ends or `stop` says so.
std::vector<v1::JobEvent> stream_events(TestDaemon& d, const std::string& name, int64_t since,
                                        std::function<bool(const v1::JobEvent&)> stop = {},
                                        int heartbeat_seconds = 0, grpc::Status* status = nullptr) {
    v1::StreamJobEventsRequest req;
    req.set_name(name);
    req.set_since_sequence(since);
    req.set_heartbeat_seconds(heartbeat_seconds);
    auto c = ctx("", 20);
    auto reader = d.stub().StreamJobEvents(c.get(), req);
    std::vector<v1::JobEvent> out;
    v1::JobEvent e;
    while (reader->Read(&e)) {
        out.push_back(e);
        if (stop && stop(e)) {
            c->TryCancel();
            break;
        }
    }
    const grpc::Status s = reader->Finish();
    if (status) *status = s;
    return out;
}

TEST_CASE("create, get and list with pagination, filters and queue positions", "[daemon][grpc]") {
    TempDir dir;
    TestDaemon d(test_config(dir), /*start=*/false);
    std::vector<std::string> names;
    for (int i = 0; i < 5; ++i) {
        v1::JobSpec spec = fake_spec("o" + std::to_string(i));
        (*spec.mutable_labels())["team"] = i % 2 ? "b" : "a";
        if (i == 3) spec.set_priority(5);
        Job job;
        REQUIRE(create(d, spec, &job).ok());
        CHECK(job.state() == Job::QUEUED);
        CHECK(job.spec().hyperparameters().learning_rate() == Approx(1e-5));  // normalized
        names.push_back(job.name());
    }
    CHECK(get(d, names[3]).queue_position() == 1);  // priority first
    CHECK(get(d, names[0]).queue_position() == 2);  // then FIFO
    CHECK(get(d, names[4]).queue_position() == 5);

    v1::ListJobsRequest req;
    req.set_page_size(2);
    std::vector<std::string> seen;
    int pages = 0;
    do {
        v1::ListJobsResponse resp;
        REQUIRE(d.stub().ListJobs(ctx().get(), req, &resp).ok());
        for (const Job& j : resp.jobs()) seen.push_back(j.name());
        req.set_page_token(resp.next_page_token());
        ++pages;
    } while (!req.page_token().empty());
    CHECK(pages == 3);
    CHECK(seen == names);  // creation order, no gaps or duplicates

    v1::ListJobsRequest by_label;
    (*by_label.mutable_labels())["team"] = "b";
    v1::ListJobsResponse resp;
    REQUIRE(d.stub().ListJobs(ctx().get(), by_label, &resp).ok());
    REQUIRE(resp.jobs_size() == 2);
    CHECK(resp.jobs(0).name() == names[1]);
    v1::ListJobsRequest running;
    running.set_state(Job::RUNNING);
    REQUIRE(d.stub().ListJobs(ctx().get(), running, &resp).ok());
    CHECK(resp.jobs_size() == 0);

    // A token is bound to its filter.
    req.set_page_token("");
    REQUIRE(d.stub().ListJobs(ctx().get(), req, &resp).ok());
    by_label.set_page_token(resp.next_page_token());
    CHECK(d.stub().ListJobs(ctx().get(), by_label, &resp).error_code() ==
          StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("CreateJob with a request_id is idempotent", "[daemon][grpc]") {
    TempDir dir;
    TestDaemon d(test_config(dir), false);
    Job a, b, c;
    REQUIRE(create(d, fake_spec("o"), &a, "req-1").ok());
    REQUIRE(create(d, fake_spec("o"), &b, "req-1").ok());
    CHECK(a.name() == b.name());
    CHECK(a.request_id() == "req-1");
    const grpc::Status s = create(d, fake_spec("other"), &c, "req-1");
    CHECK(s.error_code() == StatusCode::ALREADY_EXISTS);
    CHECK_THAT(s.error_message(), Catch::Contains(a.name()));

    v1::CreateJobRequest dry;
    *dry.mutable_spec() = fake_spec("o");
    dry.set_validate_only(true);
    Job would;
    // "o" belongs to job a now: even a dry run says so.
    const grpc::Status taken = d.stub().CreateJob(ctx().get(), dry, &would);
    CHECK(taken.error_code() == StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(taken.error_message(),
               Catch::Contains("OUTPUT_DIR_IN_USE") && Catch::Contains("belongs to " + a.name()));
    *dry.mutable_spec() = fake_spec("fresh");
    REQUIRE(d.stub().CreateJob(ctx().get(), dry, &would).ok());
    CHECK(would.name().empty());
    CHECK(!std::filesystem::exists(dir.file("outputs/fresh")));  // a dry run claims nothing
    v1::ListJobsResponse resp;
    REQUIRE(d.stub().ListJobs(ctx().get(), v1::ListJobsRequest(), &resp).ok());
    CHECK(resp.jobs_size() == 1);
}

TEST_CASE("chat data over a base template deltatune does not render is refused at submission",
          "[daemon][grpc]") {
    TempDir dir;
    DaemonConfig config = test_config(dir);
    std::ofstream(dir.file("models/tiny/chat_template.jinja")) << "{{ messages }}";
    std::ofstream(dir.file("data/tokens.jsonl")) << "{\"input_ids\": [1, 2, 3]}\n";
    TestDaemon d(config, false);
    v1::CreateJobRequest req;
    *req.mutable_spec() = fake_spec("tpl");  // train.jsonl: chat
    req.set_validate_only(true);
    Job out;
    const grpc::Status refused = d.stub().CreateJob(ctx().get(), req, &out);
    CHECK(refused.error_code() == StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(refused.error_message(),
               Catch::StartsWith("CHAT_TEMPLATE_UNKNOWN") && Catch::Contains("data.chat_template"));
    // Named, a built-in template trains (and the export carries it).
    req.mutable_spec()->mutable_data()->set_chat_template("qwen3_5");
    CHECK(d.stub().CreateJob(ctx().get(), req, &out).ok());
    // Tokenized data renders no template.
    *req.mutable_spec() = fake_spec("tpl");
    req.mutable_spec()->mutable_data()->set_train_files(0, "tokens.jsonl");
    CHECK(d.stub().CreateJob(ctx().get(), req, &out).ok());
}

TEST_CASE("every allowed and refused transition without ranks", "[daemon][grpc]") {
    TempDir dir;
    TestDaemon d(test_config(dir), false);
    Job job;
    REQUIRE(create(d, fake_spec("o"), &job).ok());
    const std::string name = job.name();
    auto cancel = [&] {
        v1::CancelJobRequest r;
        r.set_name(name);
        Job o;
        return d.stub().CancelJob(ctx().get(), r, &o);
    };
    auto pause = [&] {
        v1::PauseJobRequest r;
        r.set_name(name);
        Job o;
        return d.stub().PauseJob(ctx().get(), r, &o);
    };
    auto resume = [&] {
        v1::ResumeJobRequest r;
        r.set_name(name);
        Job o;
        return d.stub().ResumeJob(ctx().get(), r, &o);
    };
    auto del = [&] {
        v1::DeleteJobRequest r;
        r.set_name(name);
        google::protobuf::Empty o;
        return d.stub().DeleteJob(ctx().get(), r, &o);
    };

    const grpc::Status refused_resume = resume();  // QUEUED
    CHECK(refused_resume.error_code() == StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(refused_resume.error_message(), Catch::Contains("it is QUEUED"));
    CHECK(del().error_code() == StatusCode::FAILED_PRECONDITION);
    CHECK(pause().ok());
    CHECK(get(d, name).state() == Job::PAUSED);
    CHECK(pause().ok());  // idempotent
    CHECK(resume().ok());
    CHECK(get(d, name).state() == Job::QUEUED);
    CHECK(pause().ok());
    CHECK(cancel().ok());  // PAUSED -> CANCELLED
    Job cancelled = get(d, name);
    CHECK(cancelled.state() == Job::CANCELLED);
    CHECK(cancelled.state_reason() == "CANCELLED_BY_USER");
    CHECK(cancelled.has_end_time());
    CHECK(cancel().ok());  // idempotent
    CHECK(pause().error_code() == StatusCode::FAILED_PRECONDITION);
    CHECK(resume().error_code() == StatusCode::FAILED_PRECONDITION);
    CHECK(del().ok());
    v1::GetJobRequest g;
    g.set_name(name);
    CHECK(d.stub().GetJob(ctx().get(), g, &job).error_code() == StatusCode::NOT_FOUND);
    CHECK(del().error_code() == StatusCode::NOT_FOUND);

    const std::vector<std::string> types = [&] {
        std::vector<std::string> t;
        for (const auto& e : all_events(d, name)) t.push_back(e.type());
        return t;
    }();
    CHECK(types.empty());  // deleted with the job
}

TEST_CASE("hostile input is refused with the right code and the server keeps serving",
          "[daemon][grpc][security]") {
    TempDir dir;
    DaemonConfig config = test_config(dir);
    config.limits.max_request_bytes = 64 << 10;
    TestDaemon d(config, false);
    Job job;
    REQUIRE(create(d, fake_spec("o"), &job).ok());

    v1::JobSpec huge = fake_spec("o");
    (*huge.mutable_labels())["big"] = std::string(100 << 10, 'x');
    CHECK(create(d, huge, &job).error_code() == StatusCode::RESOURCE_EXHAUSTED);

    std::filesystem::create_symlink("/etc", dir.file("data/etc"));
    for (const char* bad : {"../../etc/passwd", "/etc/passwd", "etc/passwd"}) {
        v1::JobSpec spec = fake_spec("o");
        spec.mutable_data()->set_train_files(0, bad);
        const grpc::Status s = create(d, spec, &job);
        CHECK(s.error_code() == StatusCode::INVALID_ARGUMENT);
        CHECK_THAT(s.error_message(), Catch::StartsWith("PATH_NOT_ALLOWED: data.train_files[0]"));
    }
    v1::JobSpec no_steps = fake_spec("o", "train", 0);
    CHECK_THAT(create(d, no_steps, &job).error_message(),
               Catch::Contains("give one of max_steps (0) and num_epochs (0)"));

    v1::ListJobsRequest list;
    v1::ListJobsResponse resp;
    list.set_page_size(-1);
    CHECK(d.stub().ListJobs(ctx().get(), list, &resp).error_code() == StatusCode::INVALID_ARGUMENT);
    list.set_page_size(1 << 30);  // clamped to 1000
    CHECK(d.stub().ListJobs(ctx().get(), list, &resp).ok());
    list.set_state(static_cast<Job::State>(99));
    CHECK(d.stub().ListJobs(ctx().get(), list, &resp).error_code() == StatusCode::INVALID_ARGUMENT);
    list.clear_state();
    list.set_page_token("garbage");
    CHECK(d.stub().ListJobs(ctx().get(), list, &resp).error_code() == StatusCode::INVALID_ARGUMENT);

    v1::GetJobRequest g;
    g.set_name("jobs/doesnotexist");
    CHECK(d.stub().GetJob(ctx().get(), g, &job).error_code() == StatusCode::NOT_FOUND);
    g.set_name("jobs/../../etc");
    CHECK(d.stub().GetJob(ctx().get(), g, &job).error_code() == StatusCode::INVALID_ARGUMENT);
    grpc::Status stream_status;
    stream_events(d, "jobs/nope", 0, {}, 0, &stream_status);
    CHECK(stream_status.error_code() == StatusCode::NOT_FOUND);
    v1::ListCheckpointsRequest cp;
    cp.set_name("jobs/nope");
    v1::ListCheckpointsResponse cps;
    CHECK(d.stub().ListCheckpoints(ctx().get(), cp, &cps).error_code() == StatusCode::NOT_FOUND);

    list.Clear();
    REQUIRE(d.stub().ListJobs(ctx().get(), list, &resp).ok());
    CHECK(resp.jobs_size() == 1);  // still serving, nothing half-created
}

TEST_CASE("bearer tokens: missing or wrong is UNAUTHENTICATED", "[daemon][grpc][security]") {
    TempDir dir;
    TestDaemon d(test_config(dir), false, {"s3cret-token"});
    v1::ListJobsResponse resp;
    CHECK(d.stub().ListJobs(ctx().get(), {}, &resp).error_code() == StatusCode::UNAUTHENTICATED);
    CHECK(d.stub().ListJobs(ctx("wrong").get(), {}, &resp).error_code() ==
          StatusCode::UNAUTHENTICATED);
    CHECK(d.stub().ListJobs(ctx("s3cret-token").get(), {}, &resp).ok());
    v1::StreamJobEventsRequest req;
    req.set_name("jobs/x");
    auto c = ctx();
    auto reader = d.stub().StreamJobEvents(c.get(), req);
    v1::JobEvent e;
    CHECK_FALSE(reader->Read(&e));
    CHECK(reader->Finish().error_code() == StatusCode::UNAUTHENTICATED);
}

TEST_CASE("health and reflection are served (grpcurl works)", "[daemon][grpc]") {
    TempDir dir;
    TestDaemon d(test_config(dir), false);
    std::string health;
    REQUIRE(generic_call(d.channel(), "/grpc.health.v1.Health/Check", "", &health).ok());
    CHECK(health == std::string("\x08\x01", 2));  // status: SERVING
    std::string services;                         // ServerReflectionRequest{list_services: ""}
    REQUIRE(generic_call(d.channel(),
                         "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                         std::string("\x3a\x00", 2), &services)
                .ok());
    CHECK_THAT(services, Catch::Contains("deltatune.v1.FineTuningService"));
    // grpc.reflection.v1, what current grpcurl asks first: the services, and the API's files.
    auto channel = d.channel();
    auto stub = grpc::reflection::v1::ServerReflection::NewStub(channel);
    grpc::ClientContext c;
    auto stream = stub->ServerReflectionInfo(&c);
    grpc::reflection::v1::ServerReflectionRequest req;
    grpc::reflection::v1::ServerReflectionResponse resp;
    req.set_list_services("");
    REQUIRE(stream->Write(req));
    REQUIRE(stream->Read(&resp));
    std::set<std::string> names;
    for (const auto& s : resp.list_services_response().service()) names.insert(s.name());
    CHECK(names.count("deltatune.v1.FineTuningService") == 1);
    CHECK(names.count("grpc.reflection.v1.ServerReflection") == 1);
    req.set_file_containing_symbol("deltatune.v1.FineTuningService.CreateJob");
    REQUIRE(stream->Write(req));
    REQUIRE(stream->Read(&resp));
    std::set<std::string> files;
    for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
        google::protobuf::FileDescriptorProto f;
        REQUIRE(f.ParseFromString(bytes));
        files.insert(f.name());
    }
    CHECK(files.count("deltatune/v1/service.proto") == 1);
    CHECK(files.count("deltatune/v1/job.proto") == 1);  // its imports come along
    req.set_file_containing_symbol("no.such.Symbol");
    REQUIRE(stream->Write(req));
    REQUIRE(stream->Read(&resp));
    CHECK(resp.error_response().error_code() == 5);  // NOT_FOUND
    CHECK(resp.original_request().file_containing_symbol() == "no.such.Symbol");
    stream->WritesDone();
    CHECK(stream->Finish().ok());
}

TEST_CASE("events stream resumes from a sequence without gaps or duplicates", "[daemon][grpc]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    Job job;
    REQUIRE(create(d, fake_spec("o", "train", 40), &job).ok());
    // First stream: the first 5 events, then the client goes away.
    auto first =
        stream_events(d, job.name(), 0, [](const v1::JobEvent& e) { return e.sequence() >= 5; });
    REQUIRE(first.size() == 5);
    // Second stream resumes after the last one seen and runs to the end of the job.
    auto rest = stream_events(d, job.name(), first.back().sequence());
    std::vector<v1::JobEvent> all = first;
    all.insert(all.end(), rest.begin(), rest.end());
    CHECK(get(d, job.name()).state() == Job::SUCCEEDED);
    for (size_t i = 0; i < all.size(); ++i) CHECK(all[i].sequence() == static_cast<int64_t>(i) + 1);
    CHECK(all.back().type() == "SUCCEEDED");
    const auto listed = all_events(d, job.name());
    REQUIRE(listed.size() == all.size());
    CHECK(all_events(d, job.name(), "STEP_METRICS").size() == 40);

    v1::ListJobEventsRequest page;
    page.set_name(job.name());
    page.set_page_size(7);
    page.set_min_sequence(10);
    v1::ListJobEventsResponse resp;
    REQUIRE(d.stub().ListJobEvents(ctx().get(), page, &resp).ok());
    REQUIRE(resp.events_size() == 7);
    CHECK(resp.events(0).sequence() == 10);
    page.set_page_token(resp.next_page_token());
    REQUIRE(d.stub().ListJobEvents(ctx().get(), page, &resp).ok());
    CHECK(resp.events(0).sequence() == 17);
}

TEST_CASE("an idle stream gets heartbeats carrying the last sequence", "[daemon][grpc]") {
    TempDir dir;
    TestDaemon d(test_config(dir), false);
    Job job;
    REQUIRE(create(d, fake_spec("o"), &job).ok());
    const auto events = all_events(d, job.name());
    const int64_t last = events.back().sequence();
    const auto start = std::chrono::steady_clock::now();
    auto got = stream_events(
        d, job.name(), last, [](const v1::JobEvent& e) { return e.type() == "HEARTBEAT"; }, 1);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    REQUIRE(got.size() == 1);
    CHECK(got[0].type() == "HEARTBEAT");
    CHECK(got[0].sequence() == last);
    CHECK(waited > 0.8);
    CHECK(waited < 3);
}

TEST_CASE("WatchJob streams the job on each change until it ends", "[daemon][grpc]") {
    TempDir dir;
    TestDaemon d(test_config(dir));
    Job job;
    REQUIRE(create(d, fake_spec("o", "train", 10), &job).ok());
    v1::WatchJobRequest req;
    req.set_name(job.name());
    auto c = ctx();
    auto reader = d.stub().WatchJob(c.get(), req);
    std::set<Job::State> states;
    Job j;
    while (reader->Read(&j)) states.insert(j.state());
    CHECK(reader->Finish().ok());
    CHECK(states.count(Job::RUNNING));
    CHECK(states.count(Job::SUCCEEDED));
    CHECK(j.state() == Job::SUCCEEDED);
    CHECK(j.progress().step() == 10);
    CHECK(j.progress().percent() == Approx(100));
}

TEST_CASE("a missing outputs root is created at start, so jobs can claim folders in it",
          "[daemon][grpc]") {
    TempDir dir;
    DaemonConfig config = test_config(dir);
    std::filesystem::remove_all(dir.file("outputs"));
    config.roots.outputs = {dir.file("outputs/nested")};
    TestDaemon d(config, false);
    CHECK(std::filesystem::is_directory(dir.file("outputs/nested")));
    Job job;
    REQUIRE(create(d, fake_spec("run"), &job).ok());
    CHECK(std::filesystem::exists(dir.file("outputs/nested/run/.deltatune-job")));
}

TEST_CASE("specs are bounded as a whole, unknown fields dropped, pages bounded by bytes",
          "[daemon][grpc][security]") {
    TempDir dir;
    TestDaemon d(test_config(dir), false);
    Job job;
    // kernels.allow_non_fused is not checked against the registry for CPU jobs: bounded anyway.
    v1::JobSpec many = fake_spec("many");
    for (int i = 0; i < 1025; ++i) many.mutable_kernels()->add_allow_non_fused("op");
    grpc::Status s = create(d, many, &job);
    CHECK(s.error_code() == StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::Contains("kernels.allow_non_fused has 1025 entries"));
    v1::JobSpec heavy = fake_spec("heavy");
    for (int i = 0; i < 100; ++i)
        heavy.mutable_kernels()->add_allow_non_fused(std::string(4000, 'k'));
    s = create(d, heavy, &job);
    CHECK(s.error_code() == StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::Contains("more than 262144"));

    v1::JobSpec unknown = fake_spec("unknown");
    unknown.GetReflection()->MutableUnknownFields(&unknown)->AddLengthDelimited(999, "junk");
    REQUIRE(create(d, unknown, &job).ok());
    CHECK(job.spec().GetReflection()->GetUnknownFields(job.spec()).empty());

    // Five 240 KB specs: a page of 1000 holds what fits in 1 MiB, then a token for the rest.
    for (int i = 0; i < 5; ++i) {
        v1::JobSpec big = fake_spec("big" + std::to_string(i));
        for (int k = 0; k < 60; ++k)
            big.mutable_kernels()->add_allow_non_fused(std::string(4000, 'k'));
        REQUIRE(create(d, big, &job).ok());
    }
    v1::ListJobsRequest list;
    list.set_page_size(1000);
    v1::ListJobsResponse first, rest;
    REQUIRE(d.stub().ListJobs(ctx().get(), list, &first).ok());
    CHECK(first.ByteSizeLong() <= (1u << 20) + (64u << 10));
    CHECK(!first.next_page_token().empty());
    list.set_page_token(first.next_page_token());
    REQUIRE(d.stub().ListJobs(ctx().get(), list, &rest).ok());
    CHECK(first.jobs_size() + rest.jobs_size() == 6);
}

}  // namespace
}  // namespace deltatune::daemon::testing
