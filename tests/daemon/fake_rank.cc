// A stand-in for `deltatuned rank` in the daemon tests: it parses the real rank command line,
// reads spec.binpb, speaks the rank protocol, and acts out the behaviour named by the job's
// "fake_rank" label so each supervision path can be driven without the trainer:
//   train (default)  step every fake_interval_ms, checkpoint on request, export at max_steps
//   crash            report once, exit 3            crash_once  crash on attempt 0, then train
//   hang             report twice, then go silent   silent      never report
//   invalid          report an ERROR event {reason: DATASET_FORMAT_INVALID}, exit 2
//   ignore_term      like hang, and ignoring SIGTERM (so only SIGKILL stops it)
// "Checkpoints" are <output_dir>/fake-ckpt-<rank> holding the step, so resumes are observable.
// A profile order (ProfileJob) is answered at once with <output_dir>/profiles/<id>.binpb and a
// PROFILE_COMPLETED event; label fake_profile=symlink makes that file a link to one outside the
// output folder instead (the daemon must not follow it); fake_profile=huge pads its trace to 65
// MiB.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "deltatune/v1/rank.grpc.pb.h"
#include "deltatune/v1/service.pb.h"

namespace {

using deltatune::v1::JobEvent;
using deltatune::v1::RankDirective;
using deltatune::v1::RankReport;

struct Args {
    std::map<std::string, std::string> flags;
    std::string get(const std::string& k) const {
        auto it = flags.find(k);
        return it == flags.end() ? "" : it->second;
    }
};

class Rank {
  public:
    Rank(const Args& a, deltatune::v1::JobSpec spec)
        : spec_(std::move(spec)),
          stub_(deltatune::v1::RankService::NewStub(
              grpc::CreateChannel(a.get("supervisor"), grpc::InsecureChannelCredentials()))) {
        base_.set_job(a.get("job"));
        base_.set_attempt(std::stoi(a.get("attempt")));
        base_.set_rank(std::stoi(a.get("rank")));
        ckpt_ = spec_.output_dir() + "/fake-ckpt-" + a.get("rank");
    }

    int attempt() const { return base_.attempt(); }

    // Sends a report; retries a lost supervisor for a few seconds, then gives up like a real
    // rank would (exit 1).
    RankDirective::Action report(RankReport r) {
        r.MergeFrom(base_);
        for (int tries = 0; tries < 100; ++tries) {
            grpc::ClientContext ctx;
            ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
            RankDirective d;
            if (stub_->Report(&ctx, r, &d).ok()) {
                if (d.profile_steps() > 0) profile(d.profile_id(), d.profile_steps());
                return d.action();
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        std::fprintf(stderr, "fake rank: supervisor unreachable\n");
        std::exit(1);
    }

    static JobEvent event(const std::string& type, std::map<std::string, std::string> details = {},
                          JobEvent::Level level = JobEvent::INFO) {
        JobEvent e;
        e.set_type(type);
        e.set_level(level);
        e.set_message(type);
        for (auto& [k, v] : details) (*e.mutable_details())[k] = v;
        return e;
    }

    void profile(const std::string& id, int steps) {
        namespace fs = std::filesystem;
        const fs::path dir = fs::path(spec_.output_dir()) / "profiles";
        fs::create_directories(dir);
        deltatune::v1::Profile p;
        p.set_profile_id(id);
        p.set_steps(steps);
        p.set_wall_ms(10.0 * steps);
        deltatune::v1::Profile::Kernel* k = p.add_kernels();
        k->set_name("fake_kernel"), k->set_launches(7), k->set_total_ms(1.5);
        p.set_trace_json("{\"traceEvents\": []}");
        if (spec_.labels().count("fake_profile") && spec_.labels().at("fake_profile") == "huge") {
            p.set_trace_json(std::string(65 << 20, ' ') + p.trace_json());  // past GetProfile's cap
        }
        const fs::path file = dir / (id + ".binpb");
        if (spec_.labels().count("fake_profile") &&
            spec_.labels().at("fake_profile") == "symlink") {
            const fs::path outside = fs::path(spec_.output_dir()).parent_path() / (id + ".outside");
            std::ofstream(outside, std::ios::binary) << p.SerializeAsString();
            fs::create_symlink(outside, file);
        } else {
            std::ofstream(file, std::ios::binary) << p.SerializeAsString();
        }
        RankReport r;
        *r.add_events() = event("PROFILE_COMPLETED", {{"profile_id", id}});
        report(r);
    }

    int64_t load_step() const {
        std::ifstream in(ckpt_);
        int64_t step = 0;
        in >> step;
        return step;
    }

    RankReport checkpoint(int64_t step) const {
        std::filesystem::create_directories(spec_.output_dir());
        std::ofstream(ckpt_) << step;
        RankReport r;
        // As the trainer does: step and bytes in metrics, path in details.
        JobEvent e = event("CHECKPOINT_COMMITTED", {{"path", ckpt_}});
        (*e.mutable_metrics())["step"] = static_cast<double>(step);
        (*e.mutable_metrics())["bytes"] = 8;
        *r.add_events() = e;
        r.set_latest_checkpoint(ckpt_);
        return r;
    }

    int train(int interval_ms, bool hang) {
        int64_t step = load_step();
        const int64_t max_steps = spec_.hyperparameters().max_steps();
        const int64_t every = spec_.checkpoint().every_n_steps();
        RankReport first;
        *first.add_events() =
            event("TRAINING_STARTED", {{"resumed_from_step", std::to_string(step)}});
        if (report(first) == RankDirective::EXIT_NOW) return 0;
        for (int reports = 1;; ++reports) {
            std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
            if (hang && reports >= 2) pause();
            ++step;
            RankReport r = every > 0 && step % every == 0 ? checkpoint(step) : RankReport();
            r.mutable_progress()->set_step(step);
            r.mutable_progress()->set_total_steps(max_steps);
            (*r.mutable_latest_metrics())["loss"] = 1.0 / static_cast<double>(step);
            JobEvent metrics = event("STEP_METRICS", {{"step", std::to_string(step)}});
            (*metrics.mutable_metrics())["loss"] = 1.0 / static_cast<double>(step);
            *r.add_events() = metrics;
            if (step >= max_steps && base_.rank() == 0) {
                const std::string path = spec_.output_dir() + "/export";
                *r.add_events() = event("EXPORT_COMPLETED", {{"path", path}});
                report(r);
                return 0;
            }
            const RankDirective::Action action = report(r);
            if (action == RankDirective::EXIT_NOW) return 0;
            if (action == RankDirective::CHECKPOINT_AND_EXIT) {
                report(checkpoint(step));
                return 0;
            }
        }
    }

  private:
    deltatune::v1::JobSpec spec_;
    std::unique_ptr<deltatune::v1::RankService::Stub> stub_;
    RankReport base_;
    std::string ckpt_;
};

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || std::string(argv[1]) != "rank" || argc % 2 != 0) {
        std::fprintf(stderr, "usage: fake_rank rank --supervisor A --job J --attempt N ...\n");
        return 64;
    }
    Args args;
    for (int i = 2; i + 1 < argc; i += 2) args.flags[std::string(argv[i]).substr(2)] = argv[i + 1];
    deltatune::v1::JobSpec spec;
    std::ifstream in(args.get("spec"), std::ios::binary);
    if (!spec.ParseFromIstream(&in)) {
        std::fprintf(stderr, "fake rank: cannot read %s\n", args.get("spec").c_str());
        return 64;
    }
    const auto& labels = spec.labels();
    const std::string mode = labels.count("fake_rank") ? labels.at("fake_rank") : "train";
    const int interval =
        labels.count("fake_interval_ms") ? std::stoi(labels.at("fake_interval_ms")) : 50;
    std::printf("fake rank %s of %s, attempt %s, %s, mode %s\n", args.get("rank").c_str(),
                args.get("world").c_str(), args.get("attempt").c_str(), args.get("job").c_str(),
                mode.c_str());
    std::fflush(stdout);
    Rank rank(args, spec);
    if (mode == "silent") {
        for (;;) pause();
    }
    if (mode == "invalid") {
        RankReport r;
        *r.add_events() =
            Rank::event("ERROR", {{"reason", "DATASET_FORMAT_INVALID"}}, JobEvent::ERROR);
        r.mutable_events(0)->set_message("train.jsonl:3: not a JSON object");
        rank.report(r);
        return 2;
    }
    if (mode == "error_crash") {  // says why, then exits 1 (a fault the supervisor retries)
        RankReport r;
        *r.add_events() = Rank::event("RANK_ERROR", {{"reason", "OUT_OF_MEMORY"}}, JobEvent::ERROR);
        r.mutable_events(0)->set_message("step 3: cannot allocate 2.0 GiB");
        rank.report(r);
        return 1;
    }
    if (mode == "crash" || (mode == "crash_once" && rank.attempt() == 0)) {
        RankReport r;
        *r.add_events() = Rank::event("TRAINING_STARTED");
        rank.report(r);
        return 3;
    }
    if (mode == "ignore_term") signal(SIGTERM, SIG_IGN);
    return rank.train(interval, mode == "hang" || mode == "ignore_term");
}
