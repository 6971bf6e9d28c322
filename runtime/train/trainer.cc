// The rank's training loop (see trainer.h): setup, resume, then per step train_step ->
// report_step -> evaluation and checkpoint when due -> the ranks' agreed stop, then finish
// (final checkpoint, evaluation, export).
#include "runtime/train/trainer.h"

#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/kernel_registry.h"
#include "runtime/model/model_flops.h"
#include "runtime/train/train_state.h"
#include "runtime/train/trainer_inputs.h"

namespace deltatune {

namespace fs = std::filesystem;

namespace {

absl::Status check_finite(const char* what, double value, int64_t step) {
    if (std::isfinite(value)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "NON_FINITE: step ", step, ": the ", what, " is ", value,
        "; the update was not applied past it and no checkpoint or export holds it (lower "
        "hyperparameters.learning_rate, or check the data)"));
}

// Everything one train() call holds. Heap-allocated once: the engine keeps references into it.
struct Run {
    Run(const TrainConfig& config, const TrainerHooks& h) : c(config), hooks(h) {}
    const TrainConfig& c;
    const TrainerHooks& hooks;
    Loaded in;
    LocalCommunicator local;
    std::unique_ptr<TrainEngine> engine;
    Communicator* comm = nullptr;
    int world = 1, rank = 0, shards = 1;
    std::optional<Packer> packer;
    std::string ckpt_root;
    LrSchedule lr;
    TrainState state;
    TrainResult result;
    std::chrono::steady_clock::time_point start;
    int64_t first_tokens = 0;     // tokens consumed before this attempt (a resume's)
    int64_t evaluated_step = -1;  // the step of the last evaluation, so the end does not repeat it
    // (time, tokens) at the end of this attempt's recent steps, oldest first (at most
    // kThroughputWindow + 1): throughput and ETA over them, not the whole attempt.
    std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent;
};

constexpr size_t kThroughputWindow = 20;  // steps

// What one optimizer step trained on and gave.
struct StepOutcome {
    double loss = 0, lr = 0, grad_norm = 0;
    int64_t global_labels = 0, real_tokens = 0;
    double flops = 0;     // model FLOPs of the global step (model_flops.h), for MFU
    uint64_t digest = 0;  // FNV-1a over the global step's (doc, begin, end), whatever the world
};

absl::StatusOr<std::unique_ptr<Run>> setup(const TrainConfig& c, const TrainerHooks& hooks) {
    if (c.max_steps <= 0)
        return absl::InvalidArgumentError(absl::StrCat("max_steps must be > 0, got ", c.max_steps));
    if (c.grad_accum <= 0) return absl::InvalidArgumentError("gradient_accumulation must be > 0");
    auto run = std::make_unique<Run>(c, hooks);
    DT_ASSIGN_OR_RETURN(run->in, load_train_inputs(c, hooks));
    const auto engine_start = std::chrono::steady_clock::now();
    if (c.gpu.enabled) {
        GpuRankOptions gpu = c.gpu;
        gpu.tokens_per_batch = c.tokens_per_batch;
        DT_ASSIGN_OR_RETURN(run->engine, make_gpu_train_engine(run->in.model, gpu,
                                                               c.lora ? &run->in.adapters : nullptr,
                                                               c.lora ? c.lora->scale() : 0.0f));
    } else {
        DT_ASSIGN_OR_RETURN(
            run->engine,
            make_cpu_engine_for(c, run->in.model, c.comm ? *c.comm : run->local, run->in.adapters));
    }
    // This is where the weights are read: the rank's shard, streamed from the files.
    hooks.on_event(
        {"ENGINE_READY",
         "INFO",
         run->engine->name(),
         {{"seconds",
           std::chrono::duration<double>(std::chrono::steady_clock::now() - engine_start).count()}},
         {{"engine", run->engine->name()}}});
    run->comm = &run->engine->comm();
    run->world = run->comm->world_size();
    run->rank = run->comm->rank();
    run->shards = c.data_shards > 0 ? c.data_shards : run->world;
    if (run->shards % run->world != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data_shards ", run->shards, " is not a multiple of the world size ", run->world));
    }
    PackingOptions po{c.tokens_per_batch, c.shuffle_window, c.seed, run->shards, c.overlong, {}};
    DT_ASSIGN_OR_RETURN(po.mixture, training_mixture(run->in.train, c.train_weights));
    DT_ASSIGN_OR_RETURN(run->packer, Packer::create(run->in.train.lengths(), po));
    run->ckpt_root = (fs::path(c.output_dir) / "checkpoints").string();
    run->lr = c.lr;
    run->lr.max_steps = c.max_steps;
    return run;
}

absl::Status restore_from(Run& run, const std::string& path, const TrainState& state) {
    run.state = state;
    DT_RETURN_IF_ERROR(run.packer->restore(state.data_cursor));
    run.result.latest_checkpoint = path;
    run.hooks.on_event({"RESUMED", "INFO", path, {{"step", double(state.step)}}, {{"path", path}}});
    return absl::OkStatus();
}

// Resumes from the newest checkpoint in the output folder that verifies (corrupt ones are
// reported and skipped), else from the one the config names (which must load).
absl::Status resume(Run& run) {
    DT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> ckpts, list_checkpoints(run.ckpt_root));
    if (ckpts.empty() && !run.c.resume_checkpoint.empty()) {
        DT_ASSIGN_OR_RETURN(TrainState state,
                            load_train_state(run.c.resume_checkpoint, run.engine->state_io()));
        return restore_from(run, run.c.resume_checkpoint, state);
    }
    for (auto it = ckpts.rbegin(); it != ckpts.rend(); ++it) {
        auto loaded = load_train_state(it->path, run.engine->state_io());
        if (loaded.ok()) return restore_from(run, it->path, *loaded);
        run.hooks.on_event({"CHECKPOINT_CORRUPT",
                            "WARNING",
                            std::string(loaded.status().message()),
                            {},
                            {{"path", it->path}, {"reason", "CHECKPOINT_CORRUPT"}}});
    }
    return absl::OkStatus();
}

absl::Status checkpoint(Run& run) {
    run.state.data_cursor = run.packer->cursor();
    run.hooks.on_event({"CHECKPOINT_STARTED", "INFO", "", {{"step", double(run.state.step)}}, {}});
    const auto t0 = std::chrono::steady_clock::now();
    DT_ASSIGN_OR_RETURN(CheckpointInfo info, save_train_state(run.ckpt_root, run.state,
                                                              run.engine->state_io(), *run.comm));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    run.result.latest_checkpoint = info.path;
    run.hooks.on_event(
        {"CHECKPOINT_COMMITTED",
         "INFO",
         info.path,
         {{"step", double(info.step)}, {"bytes", double(info.bytes)}, {"seconds", seconds}},
         {{"path", info.path}, {"sha256", info.manifest_sha256}}});
    for (const auto& p : prune_checkpoints(run.ckpt_root, run.c.keep_last_n)) {
        run.hooks.on_event({"CHECKPOINT_PRUNED", "INFO", p, {}, {{"path", p}}});
    }
    return absl::OkStatus();
}

// This rank's micro-batches of the next step. All of them are fetched first so that the loss is
// normalised by the trained targets of the whole global step (a token-weighted mean, as without
// accumulation): the counts are summed over the ranks.
absl::StatusOr<std::vector<PackedBatch>> next_batches(Run& run, StepOutcome& o) {
    std::vector<PackedBatch> micro;
    int64_t label_tokens = 0, real_tokens = 0;
    o.digest = 1469598103934665603ull;
    std::vector<int64_t> pieces;  // every rank's document pieces: each attends to itself only
    for (int64_t m = 0; m < run.c.grad_accum; ++m) {
        const std::vector<PackedBin> bins = run.packer->next_step();
        for (size_t i = 0; i < bins.size(); ++i) {
            for (const Segment& seg : bins[i].segments) {
                for (int64_t v : {seg.doc, seg.begin, seg.end}) {
                    o.digest = (o.digest ^ static_cast<uint64_t>(v)) * 1099511628211ull;
                }
                if (seg.tokens() > 0) pieces.push_back(seg.tokens());
            }
            if (static_cast<int>(i) % run.world != run.rank) continue;
            DT_ASSIGN_OR_RETURN(PackedBatch b,
                                assemble(run.in.train, bins[i], run.in.model.config.vocab_size));
            label_tokens += b.label_tokens();
            real_tokens += b.tokens();
            micro.push_back(std::move(b));
        }
    }
    if (!pieces.empty()) {
        o.flops = step_flops(run.in.model.config, pieces, run.c.lora ? run.in.adapters.numel() : 0);
    }
    double counts[2] = {static_cast<double>(label_tokens), static_cast<double>(real_tokens)};
    DT_RETURN_IF_ERROR(run.comm->all_reduce_sum(counts, 2));
    o.global_labels = static_cast<int64_t>(counts[0]);
    o.real_tokens = static_cast<int64_t>(counts[1]);
    return micro;
}

// One optimizer step: forward and backward of every micro-batch, then the update. Every rank
// scales its gradients by the global label count, and the reduce-scatter sums them.
absl::StatusOr<StepOutcome> train_step(Run& run) {
    StepOutcome o;
    DT_ASSIGN_OR_RETURN(std::vector<PackedBatch> micro, next_batches(run, o));
    double loss_sum = 0;
    DT_RETURN_IF_ERROR(run.engine->begin_step());
    for (size_t m = 0; m < micro.size(); ++m) {
        DT_ASSIGN_OR_RETURN(
            const double sum,
            run.engine->forward_backward(micro[m], o.global_labels, m + 1 == micro.size()));
        loss_sum += sum;
    }
    DT_RETURN_IF_ERROR(run.comm->all_reduce_sum(&loss_sum, 1));
    // A NaN or infinite loss would poison the weights: stop before the update, keeping the last
    // checkpoint, rather than train on and export a NaN model.
    const int64_t step = run.state.step + 1;
    DT_RETURN_IF_ERROR(check_finite("loss", loss_sum, step));
    AdamWHyper hyper = run.c.adamw;
    hyper.lr = run.lr.at(step);
    DT_ASSIGN_OR_RETURN(o.grad_norm, run.engine->apply(hyper, run.c.max_grad_norm));
    DT_RETURN_IF_ERROR(check_finite("gradient norm", o.grad_norm, step));
    o.lr = hyper.lr;
    run.state.step = step;
    run.state.tokens += o.real_tokens;
    // A step whose documents hold no trained token has no loss: NaN, never a fake 0.
    o.loss = o.global_labels ? loss_sum / static_cast<double>(o.global_labels)
                             : std::numeric_limits<double>::quiet_NaN();
    if (o.global_labels) run.state.last_loss = o.loss;
    run.result.last_loss = run.state.last_loss;
    return o;
}

// A GPU step's MFU (model FLOPs over the ranks' peak for the step's wall time) and this rank's
// device memory: the most it has held and the planner's figure. Nothing on the CPU.
std::map<std::string, double> device_metrics(const Run& run, const StepOutcome& o,
                                             double step_seconds) {
    std::map<std::string, double> out;
    const TrainEngine::DeviceFigures d = run.engine->device_figures();
    if (d.peak_flops > 0 && step_seconds > 0 && o.flops > 0) {
        out["mfu"] = o.flops / (step_seconds * d.peak_flops * run.world);
    }
    if (d.peak_bytes > 0) out["gpu_memory_peak_bytes"] = static_cast<double>(d.peak_bytes);
    if (d.planned_bytes > 0) out["gpu_memory_planned_bytes"] = static_cast<double>(d.planned_bytes);
    return out;
}

// TRAINING_STARTED's details: the engine, the recompute policy, and which implementation each
// op of the step runs on this rank ("kernel.<op>": "fused: kernels/...", as `deltatune
// kernels` prints), so a job's own record says what it ran.
std::map<std::string, std::string> started_details(const Run& run) {
    std::map<std::string, std::string> d = {{"engine", run.engine->name()},
                                            {"recompute", run.engine->recompute()}};
    const MachineInfo machine = run.c.gpu.enabled ? probe_machine() : MachineInfo{};
    for (const KernelChoice& k : kernel_registry_for(machine, &run.in.model.config).ops) {
        d["kernel." + k.op] = absl::StrCat(kernel_kind_name(k.kind), ": ", k.implementation);
    }
    return d;
}

// STEP_METRICS, and the progress the hooks get once evaluation and checkpoint are done.
TrainProgress report_step(Run& run, const StepOutcome& o) {
    const TrainConfig& c = run.c;
    const auto now = std::chrono::steady_clock::now();
    if (run.recent.empty()) run.recent.emplace_back(run.start, run.first_tokens);
    const double step_seconds =
        std::chrono::duration<double>(now - run.recent.back().first).count();
    run.recent.emplace_back(now, run.state.tokens);
    if (run.recent.size() > kThroughputWindow + 1) run.recent.pop_front();
    const auto& [t0, tokens0] = run.recent.front();
    const double window = std::chrono::duration<double>(now - t0).count();
    const auto window_steps = static_cast<double>(run.recent.size() - 1);
    TrainProgress p;
    p.step = run.state.step;
    p.total_steps = c.max_steps;
    p.epoch = run.packer->epoch();
    p.tokens = run.state.tokens;
    // Over this attempt's last steps (at most kThroughputWindow): after a resume the earlier
    // tokens took another process's time, and a slowdown shows within a window.
    p.tokens_per_second = window > 0 ? static_cast<double>(run.state.tokens - tokens0) / window : 0;
    p.eta_seconds = window / window_steps * static_cast<double>(c.max_steps - run.state.step);
    p.metrics = {{"loss", o.loss},
                 {"lr", o.lr},
                 {"grad_norm", o.grad_norm},
                 {"step_seconds", step_seconds},
                 {"trained_tokens", double(o.global_labels)}};
    const std::map<std::string, double> device = device_metrics(run, o, step_seconds);
    p.metrics.insert(device.begin(), device.end());
    const double waste =
        1.0 - static_cast<double>(o.real_tokens) /
                  static_cast<double>(c.grad_accum * run.shards * c.tokens_per_batch);
    std::map<std::string, double> step_event = {
        {"step", double(run.state.step)},
        {"loss", o.loss},
        {"trained_tokens", double(o.global_labels)},
        {"lr", o.lr},
        {"grad_norm", o.grad_norm},
        {"tokens_per_second", p.tokens_per_second},
        {"step_seconds", step_seconds},
        {"padding_waste", waste},
        // Which document pieces this step trained on (48 bits: exact in a double), so a
        // resumed run can be checked against an uninterrupted one.
        {"batch_digest", static_cast<double>(o.digest >> 16)},
        {"eta_seconds", p.eta_seconds}};
    step_event.insert(device.begin(), device.end());
    run.hooks.on_event({"STEP_METRICS", "INFO", "", std::move(step_event), {}});
    return p;
}

absl::Status evaluate(Run& run, TrainProgress* p) {
    DT_ASSIGN_OR_RETURN(run.result.last_eval_loss, evaluate_corpus(*run.engine, run.in.eval, run.c,
                                                                   run.in.model.config.vocab_size));
    run.evaluated_step = run.state.step;
    if (p) p->metrics["eval_loss"] = run.result.last_eval_loss;
    run.hooks.on_event(
        {"EVAL_METRICS",
         "INFO",
         "",
         {{"step", double(run.state.step)}, {"eval_loss", run.result.last_eval_loss}},
         {}});
    return absl::OkStatus();
}

// Ranks stop together: any rank's request (the strongest one) is everyone's.
absl::StatusOr<StopRequest> agreed_stop(Run& run) {
    const StopRequest mine = run.hooks.poll();
    double votes[2] = {mine == StopRequest::kExitNow ? 1.0 : 0.0,
                       mine == StopRequest::kCheckpointAndExit ? 1.0 : 0.0};
    if (run.world > 1) DT_RETURN_IF_ERROR(run.comm->all_reduce_sum(votes, 2));
    return votes[0] > 0   ? StopRequest::kExitNow
           : votes[1] > 0 ? StopRequest::kCheckpointAndExit
                          : StopRequest::kNone;
}

// After the last step: its checkpoint, the final evaluation (unless that step had one), and the
// export in Hugging Face form with the tokenizer files.
absl::Status finish(Run& run) {
    DT_RETURN_IF_ERROR(checkpoint(run));
    if (!run.in.eval.files.empty() && run.evaluated_step != run.state.step) {
        DT_RETURN_IF_ERROR(evaluate(run, nullptr));
    }
    TrainResult& result = run.result;
    result.export_dir = (fs::path(run.c.output_dir) / "export").string();
    run.hooks.on_event(
        {"EXPORT_STARTED", "INFO", result.export_dir, {}, {{"path", result.export_dir}}});
    // Collective on GPU ranks: a LoRA adapter's download, or the parameters unit by unit.
    if (run.c.lora) DT_RETURN_IF_ERROR(run.engine->download(run.in.model.params));
    DT_RETURN_IF_ERROR(write_export(run.c, run.in.model, run.in.adapters,
                                    run.engine->param_bytes(run.in.model.params), result.export_dir,
                                    run.rank == 0));
    DT_RETURN_IF_ERROR(run.comm->barrier());  // every rank reports the export once it exists
    run.hooks.on_event({"EXPORT_COMPLETED",
                        "INFO",
                        result.export_dir,
                        {{"loss", result.last_loss}},
                        {{"path", result.export_dir}}});
    result.completed = true;
    return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainResult> train(const TrainConfig& c, const TrainerHooks& hooks) {
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Run> run, setup(c, hooks));
    DT_RETURN_IF_ERROR(resume(*run));
    run->start = std::chrono::steady_clock::now();
    run->first_tokens = run->state.tokens;
    hooks.on_event({"TRAINING_STARTED",
                    "INFO",
                    "",
                    {{"step", double(run->state.step)}, {"world_size", double(run->world)}},
                    started_details(*run)});
    const bool has_eval = !run->in.eval.files.empty() && c.eval_every > 0;
    while (run->state.step < c.max_steps) {
        DT_ASSIGN_OR_RETURN(const StepOutcome outcome, train_step(*run));
        const int64_t step = run->state.step;
        TrainProgress p = report_step(*run, outcome);
        if (has_eval && step % c.eval_every == 0) DT_RETURN_IF_ERROR(evaluate(*run, &p));
        if (c.checkpoint_every > 0 && step % c.checkpoint_every == 0 && step < c.max_steps) {
            DT_RETURN_IF_ERROR(checkpoint(*run));
        }
        p.latest_checkpoint = run->result.latest_checkpoint;
        hooks.on_progress(p);
        DT_ASSIGN_OR_RETURN(const StopRequest stop, agreed_stop(*run));
        if (stop == StopRequest::kCheckpointAndExit && step < c.max_steps) {
            DT_RETURN_IF_ERROR(checkpoint(*run));
        }
        if (stop == StopRequest::kExitNow ||
            (stop == StopRequest::kCheckpointAndExit && step < c.max_steps)) {
            run->result.step = step;
            return run->result;
        }
    }
    DT_RETURN_IF_ERROR(finish(*run));
    run->result.step = run->state.step;
    return run->result;
}

}  // namespace deltatune
