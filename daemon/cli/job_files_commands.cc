// deltatune checkpoints|export|profile: what a job leaves behind, listed, exported as a Hugging
// Face folder (written where the command runs) and traced.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "daemon/config/spec_to_config.h"
#include "runtime/base/status_macros.h"
#include "runtime/train/trainer_inputs.h"

namespace deltatune::cli {
namespace {

// Every page of a job's checkpoints, in one response.
grpc::Status all_checkpoints(JobClient& client, const std::string& name,
                             v1::ListCheckpointsResponse* all) {
    v1::ListCheckpointsRequest req;
    req.set_name(name);
    do {
        v1::ListCheckpointsResponse page;
        auto ctx = client.context();
        const grpc::Status s = client.stub().ListCheckpoints(ctx.get(), req, &page);
        if (!s.ok()) return s;
        for (auto& c : *page.mutable_checkpoints()) *all->add_checkpoints() = std::move(c);
        req.set_page_token(page.next_page_token());
    } while (!req.page_token().empty());
    return grpc::Status::OK;
}

int checkpoints(const OneJobFlags& flags) {
    auto job = one_job(flags);
    if (!job.ok()) return fail("checkpoints", job.status());
    v1::ListCheckpointsResponse resp;
    const grpc::Status s = all_checkpoints(job->client, job->name, &resp);
    if (!s.ok()) return report_rpc_error(s);
    if (job->client.json()) {
        std::printf("%s\n", to_json(resp).c_str());
        return 0;
    }
    for (const auto& c : resp.checkpoints()) {
        std::string eval = c.eval_loss() != 0 ? absl::StrFormat("  eval %.4f", c.eval_loss()) : "";
        if (c.best()) eval += " (best)";
        std::printf("step %-8lld %12lld bytes  %s  sha256 %s%s\n", static_cast<long long>(c.step()),
                    static_cast<long long>(c.bytes()), c.path().c_str(),
                    c.manifest_sha256().c_str(), eval.c_str());
    }
    return 0;
}

// The checkpoint of step `step` (0: the newest; with `best`, early stopping's best), or NotFound
// naming the steps there are.
absl::StatusOr<v1::Checkpoint> pick_checkpoint(const v1::ListCheckpointsResponse& all,
                                               const std::string& name, uint64_t step, bool best) {
    if (best) {
        for (int i = all.checkpoints_size() - 1; i >= 0; --i) {
            if (all.checkpoints(i).best()) return all.checkpoints(i);
        }
        return absl::NotFoundError(absl::StrCat(
            name, " has no best checkpoint (it needs early_stopping and one evaluation)"));
    }
    std::vector<std::string> steps;
    for (const auto& c : all.checkpoints()) {
        if (step != 0 && static_cast<uint64_t>(c.step()) == step) return c;
        steps.push_back(absl::StrCat(c.step()));
    }
    if (step == 0 && all.checkpoints_size() > 0) return all.checkpoints(all.checkpoints_size() - 1);
    return absl::NotFoundError(steps.empty()
                                   ? absl::StrCat(name, " has no checkpoint to export")
                                   : absl::StrCat(name, " has no checkpoint of step ", step,
                                                  " (steps ", absl::StrJoin(steps, ", "), ")"));
}

struct ExportFlags {
    OneJobFlags job;
    uint64_t step = 0;
    std::string out;
    bool best = false, merged = false;
};

// A committed checkpoint as a Hugging Face folder, written here: run it where the job's files
// are (the daemon's machine or a shared filesystem). A checkpoint as the job's own export would
// write it: the whole model, or for a LoRA job its adapter as a PEFT folder (`--merged`: merged
// into the base) from the job's own adapter spec.
int export_checkpoint_here(const ExportFlags& flags) {
    auto one = one_job(flags.job);
    if (!one.ok()) return fail("export", one.status());
    JobClient* client = &one->client;
    const std::string& name = one->name;
    v1::GetJobRequest get;
    get.set_name(name);
    v1::Job job;
    auto ctx = client->context();
    if (grpc::Status s = client->stub().GetJob(ctx.get(), get, &job); !s.ok()) {
        return report_rpc_error(s);
    }
    v1::ListCheckpointsResponse all;
    if (grpc::Status s = all_checkpoints(*client, name, &all); !s.ok()) return report_rpc_error(s);
    if (flags.step != 0 && flags.best) {
        return fail("export", absl::InvalidArgumentError("--step and --best: give one"));
    }
    const absl::StatusOr<v1::Checkpoint> cp = pick_checkpoint(all, name, flags.step, flags.best);
    if (!cp.ok()) return fail("export", cp.status());
    const std::string out =
        !flags.out.empty() ? flags.out
                           : absl::StrCat(job.spec().output_dir(), "/export-step-", cp->step());
    TrainConfig c = train_config_from_spec(job.spec());
    if (flags.merged) {
        if (!c.lora) {
            return fail("export", absl::InvalidArgumentError(
                                      absl::StrCat("--merged: ", name, " is not a LoRA job")));
        }
        c.lora_merged_export = true;
    }
    const absl::StatusOr<int64_t> exported = export_checkpoint(c, cp->path(), out);
    if (!exported.ok()) return fail("export", exported.status());
    std::printf("exported step %lld of %s to %s%s\n", static_cast<long long>(*exported),
                name.c_str(), out.c_str(),
                !c.lora                ? ""
                : c.lora_merged_export ? " (LoRA merged)"
                                       : " (LoRA, PEFT)");
    return 0;
}

// DownloadProfile's pieces, joined and parsed (GetProfile would refuse a trace over 64 MiB).
grpc::Status download_profile(JobClient* client, const v1::GetProfileRequest& req,
                              v1::Profile* out) {
    auto ctx = client->context();
    std::unique_ptr<grpc::ClientReader<v1::ProfileChunk>> reader =
        client->stub().DownloadProfile(ctx.get(), req);
    std::string bytes;
    v1::ProfileChunk chunk;
    while (reader->Read(&chunk)) {
        if (chunk.offset() != static_cast<int64_t>(bytes.size())) {
            return grpc::Status(grpc::StatusCode::DATA_LOSS, "profile pieces out of order");
        }
        if (bytes.empty()) {
            bytes.reserve(
                static_cast<size_t>(std::clamp<int64_t>(chunk.total_bytes(), 0, 1 << 30)));
        }
        bytes += chunk.data();
    }
    grpc::Status s = reader->Finish();
    if (s.ok() && (!out->ParseFromString(bytes) || out->profile_id() != req.profile_id())) {
        s = grpc::Status(grpc::StatusCode::DATA_LOSS, "the profile does not parse");
    }
    return s;
}

struct ProfileFlags {
    OneJobFlags job;
    uint64_t steps = 3, wait_seconds = 600;
    std::string out;
};

// Orders a profile of the job's next steps, waits for it, writes the Chrome trace and prints
// where the time went.
int profile(const ProfileFlags& flags) {
    auto one = one_job(flags.job);
    if (!one.ok()) return fail("profile", one.status());
    JobClient* client = &one->client;
    v1::ProfileJobRequest req;
    req.set_name(one->name);
    req.set_steps(static_cast<int32_t>(std::min<uint64_t>(flags.steps, 1 << 20)));
    v1::ProfileJobResponse ordered;
    auto ctx = client->context();
    if (grpc::Status s = client->stub().ProfileJob(ctx.get(), req, &ordered); !s.ok()) {
        return report_rpc_error(s);
    }
    std::fprintf(stderr, "profile %s: tracing the next %llu step(s) of %s\n",
                 ordered.profile_id().c_str(), static_cast<unsigned long long>(flags.steps),
                 one->name.c_str());
    v1::GetProfileRequest get;
    get.set_name(one->name);
    get.set_profile_id(ordered.profile_id());
    v1::Profile p;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(flags.wait_seconds);
    for (;;) {
        auto c = client->context();
        const grpc::Status s = download_profile(client, get, &p);
        if (s.ok()) break;
        if (s.error_code() != grpc::StatusCode::NOT_FOUND ||
            std::chrono::steady_clock::now() > deadline) {
            return report_rpc_error(s);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    const std::string out =
        !flags.out.empty() ? flags.out : absl::StrCat("profile-", p.profile_id(), ".trace.json");
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f.write(p.trace_json().data(), static_cast<std::streamsize>(p.trace_json().size()));
    if (!f.flush())
        return fail("profile", absl::UnavailableError(absl::StrCat("cannot write ", out)));
    p.clear_trace_json();
    if (client->json()) {
        std::printf("%s\n", to_json(p).c_str());
        return kExitOk;
    }
    std::printf("steps %lld..%lld: %.1f ms per step, GPU busy %.0f%%, NCCL exposed %.1f ms\n",
                static_cast<long long>(p.first_step()),
                static_cast<long long>(p.first_step() + p.steps() - 1), p.wall_ms() / p.steps(),
                p.wall_ms() > 0 ? 100 * p.gpu_busy_ms() / p.wall_ms() : 0.0, p.nccl_exposed_ms());
    std::printf("%10s %9s %7s  %s\n", "ms", "launches", "share", "kernel");
    for (int i = 0; i < p.kernels_size() && i < 20; ++i) {
        const v1::Profile::Kernel& k = p.kernels(i);
        std::printf(
            "%10.2f %9lld %6.1f%%  %s\n", k.total_ms(), static_cast<long long>(k.launches()),
            p.gpu_busy_ms() > 0 ? 100 * k.total_ms() / p.gpu_busy_ms() : 0.0, k.name().c_str());
    }
    std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", out.c_str());
    return kExitOk;
}

}  // namespace

CommandRun checkpoints_command(CLI::App& app) {
    auto f = std::make_shared<OneJobFlags>();
    add_one_job_flags(app, *f);
    return [f] { return checkpoints(*f); };
}

CommandRun export_command(CLI::App& app) {
    auto f = std::make_shared<ExportFlags>();
    add_one_job_flags(app, f->job);
    daemon::add_count(app, "--step", f->step, "the checkpoint of this step (default: the newest)");
    app.add_flag("--best", f->best, "early stopping's best checkpoint");
    app.add_option("--out", f->out, "the folder to write (default: OUTPUT_DIR/export-step-N)")
        ->type_name("DIR");
    app.add_flag("--merged", f->merged, "a LoRA job's adapter merged into the base");
    return [f] { return export_checkpoint_here(*f); };
}

CommandRun profile_command(CLI::App& app) {
    auto f = std::make_shared<ProfileFlags>();
    add_one_job_flags(app, f->job);
    daemon::add_count(app, "--steps", f->steps, "steps to trace");
    app.add_option("--out", f->out, "the trace file (default: profile-ID.trace.json)")
        ->type_name("FILE");
    daemon::add_count(app, "--wait", f->wait_seconds, "seconds to wait for the traced steps")
        ->type_name("S");
    return [f] { return profile(*f); };
}

}  // namespace deltatune::cli
