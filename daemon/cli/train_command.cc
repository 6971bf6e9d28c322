// deltatune train JOB.yaml: runs a job's training loop in this process, without the daemon (paths
// in JOB.yaml are taken as given). With --world-size W > 1, start W processes (ranks 0..W-1) that
// share the rendezvous folder: they train data-parallel over Gloo with sharded parameters and
// optimizer state, and write one checkpoint together. A job with resources.gpus > 0 trains on the
// GPU instead (FSDP over NCCL, one process per GPU: rank R on device --device, default R when that
// many devices are visible, else 0; --timeout bounds every collective, and a rank without progress
// for twice that exits). Prints one JSON line per step (rank 0) and a final summary. With
// --plan-out FILE it trains nothing: it writes the batches the job would train, in order
// (runtime/train/training_plan.h), for feeding another trainer the same data.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "daemon/config/data_check.h"
#include "daemon/config/job_yaml.h"
#include "daemon/config/spec_to_config.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/device/device_context.h"
#include "runtime/distributed/gloo_communicator.h"
#include "runtime/train/trainer.h"
#include "runtime/train/training_plan.h"

namespace deltatune::cli {
namespace {

struct TrainFlags {
    std::string path, rendezvous, plan_out;
    uint64_t rank = 0, world_size = 1, data_shards = 0;
    std::optional<uint64_t> device;
    double timeout_seconds = 60;
};

absl::Status run_train(const TrainFlags& flags) {
    const std::string& path = flags.path;
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<daemon::ParsedJobSpec> parsed = daemon::parse_job_yaml(text.str(), {});
    if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
    }
    daemon::normalize_job_spec(&parsed->spec, &parsed->present);
    DT_RETURN_IF_ERROR(daemon::validate_job_spec(parsed->spec, {}));
    v1::DataSpec* data = parsed->spec.mutable_data();
    if (data->overlong() == v1::OVERLONG_POLICY_UNSPECIFIED) {  // as the daemon decides it
        DT_ASSIGN_OR_RETURN(const v1::OverlongPolicy overlong, daemon::default_overlong_of(*data));
        data->set_overlong(overlong);
    }
    TrainConfig config = train_config_from_spec(parsed->spec);

    GlooOptions gloo;
    const uint64_t rank = flags.rank, world = flags.world_size;
    gloo.rank = static_cast<int>(rank);
    gloo.world_size = static_cast<int>(world);
    gloo.store_dir = flags.rendezvous;
    gloo.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_seconds * 1000));
    std::unique_ptr<Communicator> comm;
    if (parsed->spec.resources().gpus() > 0) {
        if (world > 1 && gloo.store_dir.empty()) {
            return absl::InvalidArgumentError("--world-size > 1 needs --rendezvous DIR");
        }
        const int visible = cuda_device_count();
        const uint64_t device = flags.device.value_or(static_cast<int>(rank) < visible ? rank : 0);
        config.gpu.enabled = true;
        config.gpu.device = static_cast<int>(device);
        config.gpu.rank = gloo.rank, config.gpu.world_size = gloo.world_size;
        config.gpu.store_dir =
            gloo.store_dir.empty() ? config.output_dir + "/.rendezvous" : gloo.store_dir;
        config.gpu.prefix = "train-nccl";
        config.gpu.timeout = gloo.timeout;
    } else if (world > 1) {
        if (gloo.store_dir.empty()) {
            return absl::InvalidArgumentError("--world-size > 1 needs --rendezvous DIR");
        }
        DT_ASSIGN_OR_RETURN(comm, make_gloo_communicator(gloo));
    }
    config.comm = comm.get();
    config.data_shards = static_cast<int>(flags.data_shards);
    if (!flags.plan_out.empty()) {
        std::ofstream plan(flags.plan_out);
        if (!plan) return absl::NotFoundError(absl::StrCat(flags.plan_out, ": cannot write"));
        const int shards =
            flags.data_shards > 0 ? static_cast<int>(flags.data_shards) : static_cast<int>(world);
        DT_ASSIGN_OR_RETURN(const int64_t steps, write_training_plan(config, shards, plan));
        std::printf("%s\n", nlohmann::json{{"event", "PLAN_WRITTEN"},
                                           {"steps", steps},
                                           {"data_shards", shards},
                                           {"path", flags.plan_out}}
                                .dump()
                                .c_str());
        return absl::OkStatus();
    }

    TrainerHooks hooks;
    hooks.on_event = [&](const TrainerEvent& e) {
        static const std::set<std::string> kShown = {
            "DATA_LOADED", "TRAINING_STARTED",     "STEP_METRICS",  "EVAL_METRICS",
            "RESUMED",     "CHECKPOINT_COMMITTED", "EARLY_STOPPED", "EXPORT_COMPLETED"};
        if (rank != 0 || !kShown.count(e.type)) return;
        nlohmann::json j = {{"event", e.type}};
        for (const auto& [k, v] : e.metrics) j[k] = v;
        if (!e.message.empty()) j["message"] = e.message;
        for (const auto& [k, v] : e.details) j["details"][k] = v;  // skipped lines, mixture...
        std::printf("%s\n",
                    j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        std::fflush(stdout);
    };
    DT_ASSIGN_OR_RETURN(const TrainResult result, train(config, hooks));
    if (rank == 0) {
        std::printf("%s\n", nlohmann::json{{"event", "DONE"},
                                           {"completed", result.completed},
                                           {"early_stopped", result.early_stopped},
                                           {"step", result.step},
                                           {"exported_step", result.exported_step},
                                           {"loss", result.last_loss},
                                           {"export", result.export_dir}}
                                .dump()
                                .c_str());
    }
    return absl::OkStatus();
}

}  // namespace

CommandRun train_command(CLI::App& app) {
    auto f = std::make_shared<TrainFlags>();
    app.add_option("JOB.yaml", f->path, "the job file (its paths taken as given)")->required();
    daemon::add_count(app, "--rank", f->rank, "this process's rank");
    daemon::add_count(app, "--world-size", f->world_size,
                      "processes training together (data-parallel)");
    app.add_option("--rendezvous", f->rendezvous, "the folder the ranks meet in (world size > 1)")
        ->type_name("DIR");
    daemon::add_count(app, "--data-shards", f->data_shards,
                      "packed bins per micro-step (0: the world size)");
    app.add_option("--plan-out", f->plan_out,
                   "train nothing: write the batches the job would train, in order (JSON lines)")
        ->type_name("FILE");
    app.add_option("--timeout", f->timeout_seconds,
                   "seconds a collective may take; twice that without progress ends a rank")
        ->check(daemon::number())
        ->type_name("S");
    app.add_option_function<uint64_t>(
           "--device", [f](const uint64_t& d) { f->device = d; },
           "GPU jobs: this rank's device (default: the rank's, when that many are visible, else 0)")
        ->check(daemon::non_negative_integer())
        ->type_name("N");
    return [f] {
        const absl::Status s = run_train(*f);
        return s.ok() ? 0 : fail("train", s);
    };
}

}  // namespace deltatune::cli
