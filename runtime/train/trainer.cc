// The rank's training loop (see trainer.h): setup, resume, then per step train_step ->
// report_step -> evaluation and checkpoint when due -> the ranks' agreed stop, then finish
// (final checkpoint, evaluation, export).
#include "runtime/train/trainer.h"

#include <chrono>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/kernel_choice.h"
#include "runtime/model/kernel_registry.h"
#include "runtime/model/model_flops.h"
#include "runtime/train/train_state.h"
#include "runtime/train/train_step.h"
#include "runtime/train/trainer_inputs.h"
#include "runtime/train/training_length.h"

namespace deltatune {

namespace fs = std::filesystem;

namespace {

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
    TrainingLength length;  // max_steps and warmup as this run trains them
    TrainState state;
    TrainResult result;
    std::chrono::steady_clock::time_point start;
    int64_t first_tokens = 0;     // tokens consumed before this attempt (a resume's)
    int64_t evaluated_step = -1;  // the step of the last evaluation, so the end does not repeat it
    int64_t checkpointed_step = -1;  // the step of the last checkpoint this attempt wrote
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
    DT_ASSIGN_OR_RETURN(run->packer, make_train_packer(c, run->in.train, run->shards));
    run->ckpt_root = (fs::path(c.output_dir) / "checkpoints").string();
    DT_ASSIGN_OR_RETURN(run->length, train_length_of(c, *run->packer));
    run->lr = c.lr;
    run->lr.max_steps = run->length.max_steps;
    run->lr.warmup_steps = run->length.warmup_steps;
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
    const int64_t step = run.state.step;
    const EarlyStoppingState& es = run.state.early_stopping;
    const bool best = run.c.early_stopping.enabled() && es.best_step == step;
    run.state.data_cursor = run.packer->cursor();
    run.hooks.on_event({"CHECKPOINT_STARTED", "INFO", "", {{"step", double(run.state.step)}}, {}});
    const auto t0 = std::chrono::steady_clock::now();
    DT_ASSIGN_OR_RETURN(CheckpointInfo info, save_train_state(run.ckpt_root, run.state,
                                                              run.engine->state_io(), *run.comm));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    run.result.latest_checkpoint = info.path;
    run.checkpointed_step = step;
    TrainerEvent committed{
        "CHECKPOINT_COMMITTED",
        "INFO",
        info.path,
        {{"step", double(info.step)}, {"bytes", double(info.bytes)}, {"seconds", seconds}},
        {{"path", info.path}, {"sha256", info.manifest_sha256}}};
    if (run.evaluated_step == step) committed.metrics["eval_loss"] = run.result.last_eval_loss;
    if (best) committed.details["best"] = "true";
    run.hooks.on_event(committed);
    // Early stopping's best checkpoint stays whatever keep_last_n says.
    const int64_t keep = run.c.early_stopping.enabled() ? es.best_step : -1;
    for (const auto& p : prune_checkpoints(run.ckpt_root, run.c.keep_last_n, keep)) {
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
    o.digest = kBatchDigestStart;
    std::vector<int64_t> pieces;  // every rank's document pieces: each attends to itself only
    for (int64_t m = 0; m < run.c.grad_accum; ++m) {
        const std::vector<PackedBin> bins = run.packer->next_step();
        for (size_t i = 0; i < bins.size(); ++i) {
            for (const Segment& seg : bins[i].segments) {
                o.digest = batch_digest_add(o.digest, seg);
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

// One optimizer step (run_train_step): forward and backward of every micro-batch, then the
// update at the scheduled learning rate. Every rank scales its gradients by the global label
// count, and the reduce-scatter sums them.
absl::StatusOr<StepOutcome> train_step(Run& run) {
    StepOutcome o;
    DT_ASSIGN_OR_RETURN(std::vector<PackedBatch> micro, next_batches(run, o));
    const int64_t step = run.state.step + 1;
    AdamWHyper hyper = run.c.adamw;
    hyper.lr = run.lr.at(step);
    DT_ASSIGN_OR_RETURN(const StepResult r, run_train_step(*run.engine, micro, o.global_labels,
                                                           hyper, run.c.max_grad_norm, step));
    o.grad_norm = r.grad_norm;
    o.lr = hyper.lr;
    run.state.step = step;
    run.state.tokens += o.real_tokens;
    // A step whose documents hold no trained token has no loss: NaN, never a fake 0.
    o.loss = o.global_labels ? r.loss_sum / static_cast<double>(o.global_labels)
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
    d["projections"] = "bf16";
    if (run.c.gpu.enabled && run.c.gpu.fp8_projections) {
        const auto fp8 = fp8_projection_modules(run.in.model.config, machine.gpu);
        d["projections"] = fp8.empty()
                               ? "bf16 (fp8 asked for; no projection qualifies on this GPU)"
                               : absl::StrCat(
                                     "fp8 (e4m3 activations and weights, e5m2 gradients, per-row "
                                     "scales): ",
                                     absl::StrJoin(fp8, " "));
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
    p.total_steps = run.length.max_steps;
    p.epoch = run.packer->epoch();
    p.tokens = run.state.tokens;
    // Over this attempt's last steps (at most kThroughputWindow): after a resume the earlier
    // tokens took another process's time, and a slowdown shows within a window.
    p.tokens_per_second = window > 0 ? static_cast<double>(run.state.tokens - tokens0) / window : 0;
    p.eta_seconds =
        window / window_steps * static_cast<double>(run.length.max_steps - run.state.step);
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

// The eval loss at this step and, with early stopping, what it means for the run. Every rank
// takes rank 0's loss, so all of them reach the same verdict (checkpoints are collective).
absl::StatusOr<EvalVerdict> evaluate(Run& run, TrainProgress* p) {
    DT_ASSIGN_OR_RETURN(double loss, evaluate_corpus(*run.engine, run.in.eval, run.c,
                                                     run.in.model.config.vocab_size));
    if (run.world > 1) {
        if (run.rank != 0) loss = 0;
        DT_RETURN_IF_ERROR(run.comm->all_reduce_sum(&loss, 1));
    }
    run.result.last_eval_loss = loss;
    run.evaluated_step = run.state.step;
    TrainerEvent e{
        "EVAL_METRICS", "INFO", "", {{"step", double(run.state.step)}, {"eval_loss", loss}}, {}};
    if (p) p->metrics["eval_loss"] = loss;
    EvalVerdict verdict = EvalVerdict::kNotBetter;
    if (run.c.early_stopping.enabled()) {
        EarlyStoppingState& es = run.state.early_stopping;
        verdict = observe_eval(run.c.early_stopping, es, run.state.step, loss);
        e.metrics["best_eval_loss"] = es.best_eval_loss;
        e.metrics["best_step"] = double(es.best_step);
        if (p) p->metrics["best_eval_loss"] = es.best_eval_loss;
    }
    run.hooks.on_event(e);
    return verdict;
}

// EARLY_STOPPED: why the run ends before its last step.
void announce_early_stop(Run& run) {
    const EarlyStoppingState& es = run.state.early_stopping;
    const EarlyStoppingConfig& cfg = run.c.early_stopping;
    run.result.early_stopped = true;
    run.hooks.on_event(
        {"EARLY_STOPPED",
         "INFO",
         absl::StrCat("eval_loss has not improved on ", es.best_eval_loss, " (step ", es.best_step,
                      ") by more than min_delta ", cfg.min_delta, " in ", es.evals_since_best,
                      " evaluations; the export holds step ", es.best_step),
         {{"step", double(run.state.step)},
          {"best_step", double(es.best_step)},
          {"best_eval_loss", es.best_eval_loss}},
         {}});
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

// The export's weights: the engine's now, or with early stopping the best checkpoint's, read by
// rank 0 from its files while the others wait at the barrier.
absl::Status write_final_export(Run& run) {
    TrainResult& result = run.result;
    const int64_t best =
        run.c.early_stopping.enabled() ? run.state.early_stopping.best_step : int64_t{0};
    if (best > 0 && best != run.state.step) {
        const std::string path = (fs::path(run.ckpt_root) / step_dir_name(best)).string();
        if (run.rank == 0) {
            DT_RETURN_IF_ERROR(export_checkpoint(run.c, path, result.export_dir).status());
        }
        result.exported_step = best;
        return absl::OkStatus();
    }
    // Collective on GPU ranks: a LoRA adapter's download, or the parameters unit by unit.
    if (run.c.lora) DT_RETURN_IF_ERROR(run.engine->download(run.in.model.params));
    DT_RETURN_IF_ERROR(write_export(run.c, run.in.model, run.in.adapters,
                                    run.engine->param_bytes(run.in.model.params), result.export_dir,
                                    run.rank == 0));
    result.exported_step = run.state.step;
    return absl::OkStatus();
}

// After the last step: the final evaluation (unless that step had one), the checkpoint (unless
// this attempt just wrote it), and the export in Hugging Face form with the tokenizer files.
absl::Status finish(Run& run) {
    if (!run.in.eval.files.empty() && run.evaluated_step != run.state.step) {
        DT_RETURN_IF_ERROR(evaluate(run, nullptr).status());
    }
    if (run.checkpointed_step != run.state.step) DT_RETURN_IF_ERROR(checkpoint(run));
    TrainResult& result = run.result;
    result.export_dir = (fs::path(run.c.output_dir) / "export").string();
    run.hooks.on_event(
        {"EXPORT_STARTED", "INFO", result.export_dir, {}, {{"path", result.export_dir}}});
    DT_RETURN_IF_ERROR(write_final_export(run));
    DT_RETURN_IF_ERROR(run.comm->barrier());  // every rank reports the export once it exists
    run.hooks.on_event({"EXPORT_COMPLETED",
                        "INFO",
                        result.export_dir,
                        {{"loss", result.last_loss}, {"step", double(result.exported_step)}},
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
    const TrainingLength& length = run->length;
    hooks.on_event({"TRAINING_STARTED",
                    "INFO",
                    "",
                    {{"step", double(run->state.step)},
                     {"world_size", double(run->world)},
                     {"max_steps", double(length.max_steps)},
                     {"warmup_steps", double(length.warmup_steps)},
                     {"steps_per_epoch", double(length.steps_per_epoch)},
                     {"tokens_per_epoch", double(run->packer->epoch_stats().tokens)}},
                    started_details(*run)});
    const bool has_eval = !run->in.eval.files.empty() && c.eval_every > 0;
    while (run->state.step < length.max_steps) {
        DT_ASSIGN_OR_RETURN(const StepOutcome outcome, train_step(*run));
        const int64_t step = run->state.step;
        const bool last = step >= length.max_steps;
        TrainProgress p = report_step(*run, outcome);
        EvalVerdict verdict = EvalVerdict::kNotBetter;
        if (has_eval && step % c.eval_every == 0) {
            // The step is done: say so before the evaluation, or its loss shows beside the
            // previous step's number while it runs.
            p.latest_checkpoint = run->result.latest_checkpoint;
            hooks.on_progress(p);
            DT_ASSIGN_OR_RETURN(verdict, evaluate(*run, &p));
        }
        const bool stop_early = verdict == EvalVerdict::kStop && !last;
        // Scheduled checkpoints and early stopping's best; finish() writes the last one.
        const bool due = (c.checkpoint_every > 0 && step % c.checkpoint_every == 0) ||
                         verdict == EvalVerdict::kBest;
        if (due && !last && !stop_early) DT_RETURN_IF_ERROR(checkpoint(*run));
        p.latest_checkpoint = run->result.latest_checkpoint;
        hooks.on_progress(p);
        if (stop_early) {
            announce_early_stop(*run);
            break;
        }
        DT_ASSIGN_OR_RETURN(const StopRequest stop, agreed_stop(*run));
        if (stop == StopRequest::kCheckpointAndExit && !last && run->checkpointed_step != step) {
            DT_RETURN_IF_ERROR(checkpoint(*run));
        }
        if (stop == StopRequest::kExitNow || (stop == StopRequest::kCheckpointAndExit && !last)) {
            run->result.step = step;
            return run->result;
        }
    }
    DT_RETURN_IF_ERROR(finish(*run));
    run->result.step = run->state.step;
    return run->result;
}

}  // namespace deltatune
