// The rank process: JobSpec -> TrainConfig, train with runtime/train, report to the supervisor.
#include "daemon/rank/rank_main.h"

#include <signal.h>
#include <sys/prctl.h>

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/command_line.h"
#include "daemon/config/job_yaml.h"
#include "daemon/config/spec_to_config.h"
#include "daemon/rank/job_profiler.h"
#include "daemon/rank/tensorboard_writer.h"
#include "deltatune/v1/rank.grpc.pb.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/distributed/gloo_communicator.h"

namespace deltatune {

namespace {

using Clock = std::chrono::steady_clock;

struct RankArgs {
    std::string supervisor, job, spec;
    std::string address;  // where this rank listens for its peers (a node agent's address)
    int attempt = 0, rank = 0, world = 1;
    int local_rank = -1;  // index on this node: the GPU it takes (-1: the rank)
    SandboxRoots roots;   // --read-root / --write-root, repeated: the daemon's path roots
};

// The rank's command line, as RankLauncher writes it (daemon/jobs/rank_launcher.cc).
void declare_flags(CLI::App& app, RankArgs& a) {
    app.description("one rank of a job; deltatuned and its agents start these, never a user");
    app.add_option("--supervisor", a.supervisor, "the supervisor's rank socket or address")
        ->required()
        ->type_name("unix:PATH");
    app.add_option("--job", a.job, "the job")->required()->type_name("jobs/ID");
    app.add_option("--spec", a.spec, "the job's spec")->required()->type_name("SPEC.binpb");
    for (auto [name, value, help] :
         {std::tuple{"--attempt", &a.attempt, "the job's attempt this rank is of"},
          std::tuple{"--rank", &a.rank, "this rank"},
          std::tuple{"--world", &a.world, "the attempt's ranks"}}) {
        daemon::add_count(app, name, *value, help);
    }
    app.add_option_function<int>(
           "--local-rank", [&a](const int& r) { a.local_rank = r; },
           "index on this node: the GPU it takes (default: the rank)")
        ->check(daemon::non_negative_integer())
        ->type_name("N");
    app.add_option("--address", a.address, "where this rank listens for its peers")
        ->type_name("HOST");
    for (auto [name, roots] :
         {std::pair{"--read-root", &a.roots.read}, std::pair{"--write-root", &a.roots.write}}) {
        daemon::repeated(app.add_option(name, *roots, "a path root of the daemon's; repeated"))
            ->type_name("DIR");
    }
}

// The attempt's rendezvous store, kept by the supervisor (RankService StoreSet/StoreGet).
class SupervisorStore final : public KeyValueStore {
  public:
    explicit SupervisorStore(const RankArgs& args)
        : args_(args),
          stub_(v1::RankService::NewStub(
              grpc::CreateChannel(args.supervisor, grpc::InsecureChannelCredentials()))) {}
    absl::Status set(const std::string& key, const std::string& value) override {
        v1::StoreSetRequest req;
        req.set_job(args_.job);
        req.set_attempt(args_.attempt);
        req.set_key(key);
        req.set_value(value);
        v1::StoreSetResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        return to_status(stub_->StoreSet(&ctx, req, &resp));
    }
    absl::StatusOr<std::optional<std::string>> get(const std::string& key) override {
        v1::StoreGetRequest req;
        req.set_job(args_.job);
        req.set_attempt(args_.attempt);
        req.set_key(key);
        v1::StoreGetResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        if (absl::Status s = to_status(stub_->StoreGet(&ctx, req, &resp)); !s.ok()) return s;
        if (!resp.found()) return std::optional<std::string>();
        return std::optional<std::string>(resp.value());
    }

  private:
    static absl::Status to_status(const grpc::Status& s) {
        if (s.ok()) return absl::OkStatus();
        return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                            "rendezvous store: " + s.error_message());
    }
    RankArgs args_;
    std::unique_ptr<v1::RankService::Stub> stub_;
};

// Buffers events and progress and sends them to the supervisor: on every step, on important
// events, and every second from a heartbeat thread while long phases (load, tokenize) run.
class Reporter {
  public:
    Reporter(const RankArgs& args) : args_(args) {
        stub_ = v1::RankService::NewStub(
            grpc::CreateChannel(args.supervisor, grpc::InsecureChannelCredentials()));
        heartbeat_ = std::thread([this] { heartbeat_loop(); });
    }
    ~Reporter() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stopping_ = true;
        }
        cv_.notify_all();
        heartbeat_.join();
    }

    void event(const TrainerEvent& e, bool flush_now) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            v1::JobEvent* out = pending_.add_events();
            out->set_type(e.type);
            out->set_message(e.message);
            out->set_level(e.level == "ERROR"     ? v1::JobEvent::ERROR
                           : e.level == "WARNING" ? v1::JobEvent::WARNING
                                                  : v1::JobEvent::INFO);
            out->set_attempt(args_.attempt);
            for (const auto& [k, v] : e.metrics) (*out->mutable_metrics())[k] = v;
            for (const auto& [k, v] : e.details) (*out->mutable_details())[k] = v;
        }
        if (flush_now) flush();
    }

    void progress(const TrainProgress& p) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            v1::Progress* out = pending_.mutable_progress();
            out->set_step(p.step);
            out->set_total_steps(p.total_steps);
            out->set_epoch(p.epoch);
            out->set_tokens(p.tokens);
            out->set_percent(p.total_steps ? 100.0 * p.step / p.total_steps : 0);
            out->set_tokens_per_second(p.tokens_per_second);
            const auto now = std::chrono::system_clock::now();
            const auto since = now.time_since_epoch();
            const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since);
            out->mutable_last_step_time()->set_seconds(secs.count());
            out->mutable_last_step_time()->set_nanos(static_cast<int32_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(since - secs).count()));
            const auto eta = now + std::chrono::seconds(static_cast<int64_t>(p.eta_seconds));
            out->mutable_estimated_end_time()->set_seconds(
                std::chrono::duration_cast<std::chrono::seconds>(eta.time_since_epoch()).count());
            for (const auto& [k, v] : p.metrics) (*pending_.mutable_latest_metrics())[k] = v;
            if (!p.latest_checkpoint.empty()) pending_.set_latest_checkpoint(p.latest_checkpoint);
        }
        flush();
    }

    StopRequest directive() const { return directive_.load(); }
    // Called (on the reporting thread) when the supervisor orders a profile.
    void on_profile(std::function<void(const std::string& id, int steps)> fn) {
        std::lock_guard<std::mutex> lock(mu_);
        on_profile_ = std::move(fn);
    }

    // Sends what is pending. Unreachable for 30 s: the rank stops (checkpoint and exit), since
    // a supervisor that restarts re-queues the job anyway.
    void flush() {
        std::lock_guard<std::mutex> send_lock(send_mu_);
        v1::RankReport report;
        {
            std::lock_guard<std::mutex> lock(mu_);
            report.Swap(&pending_);
        }
        report.set_job(args_.job);
        report.set_attempt(args_.attempt);
        report.set_rank(args_.rank);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        v1::RankDirective d;
        const grpc::Status s = stub_->Report(&ctx, report, &d);
        last_flush_ = Clock::now();
        if (!s.ok()) {
            std::lock_guard<std::mutex> lock(mu_);
            // Keep the unsent events (in order) for the next attempt.
            v1::RankReport merged = report;
            merged.mutable_events()->MergeFrom(pending_.events());
            if (pending_.has_progress()) *merged.mutable_progress() = pending_.progress();
            pending_.Swap(&merged);
            if (Clock::now() - last_ok_ > std::chrono::seconds(30))
                directive_ = StopRequest::kCheckpointAndExit;
            return;
        }
        last_ok_ = Clock::now();
        if (d.profile_steps() > 0) {
            std::lock_guard<std::mutex> lock(mu_);
            if (on_profile_) on_profile_(d.profile_id(), d.profile_steps());
        }
        if (d.action() == v1::RankDirective::EXIT_NOW) directive_ = StopRequest::kExitNow;
        if (d.action() == v1::RankDirective::CHECKPOINT_AND_EXIT &&
            directive_ != StopRequest::kExitNow) {
            directive_ = StopRequest::kCheckpointAndExit;
        }
    }

  private:
    void heartbeat_loop() {
        std::unique_lock<std::mutex> lock(mu_);
        while (!stopping_) {
            cv_.wait_for(lock, std::chrono::seconds(1));
            if (stopping_) break;
            if (Clock::now() - last_flush_.load() < std::chrono::seconds(1)) continue;
            lock.unlock();
            flush();
            if (directive_ == StopRequest::kExitNow) std::_Exit(0);  // cancel during a long phase
            lock.lock();
        }
    }

    RankArgs args_;
    std::unique_ptr<v1::RankService::Stub> stub_;
    std::mutex mu_, send_mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    v1::RankReport pending_;
    std::function<void(const std::string&, int)> on_profile_;
    std::atomic<StopRequest> directive_{StopRequest::kNone};
    std::atomic<Clock::time_point> last_flush_{Clock::now()};
    Clock::time_point last_ok_ = Clock::now();
    std::thread heartbeat_;
};

// Errors that retrying cannot fix are the job's fault: exit 2 with a reason.
const char* reason_for(const absl::Status& s) {
    // A full disk stays full on a retry, a path outside the roots stays outside, and the same
    // data and hyperparameters give the same NaN.
    for (const char* reason : {"DISK_FULL", "PATH_NOT_ALLOWED", "NON_FINITE", "NO_TRAINED_TOKENS",
                               "NON_FUSED_KERNEL", "CHAT_TEMPLATE_UNKNOWN"}) {
        if (absl::StrContains(s.message(), absl::StrCat(reason, ": "))) return reason;
    }
    switch (s.code()) {
        case absl::StatusCode::kInvalidArgument:
            return "INVALID_CONFIG";
        case absl::StatusCode::kNotFound:
            return "DATASET_NOT_FOUND";
        case absl::StatusCode::kUnimplemented:
            return "INVALID_CONFIG";
        case absl::StatusCode::kResourceExhausted:
            return "OUT_OF_MEMORY";
        case absl::StatusCode::kDataLoss:
            return "CHECKPOINT_CORRUPT";
        case absl::StatusCode::kPermissionDenied:
            return "PERMISSION_DENIED";
        default:
            return "INTERNAL";
    }
}

}  // namespace

int rank_main(int argc, char** argv) {
    // A rank dies with its supervisor: a rank that trained on after a daemon crash would commit
    // checkpoints whose steps no one recorded. Ranks are spawned from the supervisor's scheduler
    // thread, which lives until every rank has exited, so PDEATHSIG fires only on a real crash;
    // the restarted daemon resumes the job from its last checkpoint (and kills any survivor).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    CLI::App app{"", "deltatuned rank"};
    daemon::configure_command_line(app);
    RankArgs args;
    declare_flags(app, args);
    if (const std::optional<int> status =
            daemon::parse_or_exit_status(app, std::vector<std::string>(argv + 2, argv + argc))) {
        return *status;
    }
    if (args.local_rank < 0) args.local_rank = args.rank;
    Reporter reporter(args);
    v1::JobSpec spec;
    std::ifstream in(args.spec, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    absl::StatusOr<TrainConfig> config =
        absl::InvalidArgumentError(args.spec + ": cannot read the job spec");
    if (in && spec.ParseFromString(bytes.str())) {
        // The daemon stored the spec normalised and validated; normalising again fills what a
        // spec stored by an older daemon may lack.
        daemon::normalize_job_spec(&spec);
        config = train_config_from_spec(spec);
    }
    // From here on every file the trainer opens is opened beneath the daemon's roots, resolved
    // by the kernel at the time of use (runtime/base/path_sandbox.h).
    if (config.ok() && (!args.roots.read.empty() || !args.roots.write.empty())) {
        absl::StatusOr<PathSandbox> sandbox = PathSandbox::confined(args.roots);
        absl::Status installed =
            sandbox.ok() ? install_process_sandbox(*std::move(sandbox)) : sandbox.status();
        if (!installed.ok()) config = installed;
    }
    absl::StatusOr<TrainResult> result = absl::UnknownError("not run");
    if (!config.ok()) result = config.status();
    // Data-parallel ranks meet through the supervisor's store for this attempt (a fresh one per
    // attempt, so a relaunch never reads a dead attempt's addresses): no shared filesystem.
    std::unique_ptr<Communicator> comm;
    if (config.ok() && spec.resources().gpus() > 0 && !args.address.empty()) {
        // Strict kernels on this machine too: a rank on a node agent (the only ranks given an
        // address) may run where the supervisor, which checked at submission, has no GPU or
        // another one.
        absl::StatusOr<Qwen35Config> model = load_qwen35_config(spec.model() + "/config.json");
        absl::Status strict =
            model.ok() ? daemon::check_kernels_on(probe_machine(), *model, spec) : model.status();
        if (!strict.ok()) {
            config = strict;
            result = strict;
        }
    }
    if (config.ok() && spec.resources().gpus() > 0) {
        // One GPU per rank: local rank R on the R-th device its node sees (CUDA_VISIBLE_DEVICES).
        config->gpu.enabled = true;
        config->gpu.device = args.local_rank;
        config->gpu.rank = args.rank;
        config->gpu.world_size = args.world;
        config->gpu.store = std::make_shared<SupervisorStore>(args);
    } else if (config.ok() && args.world > 1) {
        GlooOptions gloo;
        gloo.rank = args.rank;
        gloo.world_size = args.world;
        gloo.store = std::make_shared<SupervisorStore>(args);
        if (!args.address.empty()) gloo.host = args.address;
        auto made = make_gloo_communicator(gloo);
        if (made.ok()) {
            comm = std::move(*made);
            config->comm = comm.get();
        } else {
            config = made.status();
        }
    }
    if (config.ok()) {
        TrainerHooks hooks;
        TensorBoardLog tensorboard(config->output_dir + "/tensorboard");
        hooks.on_event = [&](const TrainerEvent& e) {
            // Rank 0 speaks for the job; the others report only what is theirs alone (warnings,
            // errors) and the end of the export, which the exit contract needs from every rank.
            if (args.rank != 0 && e.level == "INFO" && e.type != "EXPORT_COMPLETED") return;
            reporter.event(e, e.type != "STEP_METRICS");
            if (args.rank != 0) return;
            if (std::optional<TrainerEvent> warning = tensorboard.add(e)) {
                reporter.event(*warning, true);
            }
        };
        JobProfiler profiler(config->output_dir, absl::StrCat(args.job, " rank ", args.rank));
        reporter.on_profile([&](const std::string& id, int steps) { profiler.order(id, steps); });
        hooks.on_progress = [&](const TrainProgress& p) {
            if (std::optional<TrainerEvent> e = profiler.after_step(p.step)) {
                reporter.event(*e, true);
            }
            reporter.progress(p);
        };
        hooks.poll = [&] { return reporter.directive(); };
        result = train(*config, hooks);
        reporter.on_profile(nullptr);  // the profiler ends here
        if (std::optional<TrainerEvent> e = profiler.end()) reporter.event(*e, true);
    }
    if (!result.ok()) {
        const char* reason = reason_for(result.status());
        reporter.event({"RANK_ERROR",
                        "ERROR",
                        std::string(result.status().message()),
                        {},
                        {{"reason", reason}}},
                       true);
        std::fprintf(stderr, "rank %d: %s\n", args.rank, result.status().ToString().c_str());
        return std::string(reason) == "INTERNAL" || std::string(reason) == "OUT_OF_MEMORY" ? 1 : 2;
    }
    reporter.flush();
    return 0;
}

}  // namespace deltatune
