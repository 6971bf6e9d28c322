// deltatune bench --config CONFIG.json [flags: `deltatune bench --help`, declared below]
// The headline training-step benchmark (docs/performance.md) over runtime/train/benchmark.h: the
// engine daemon jobs train with, random-initialised, synthetic batches, each step the trainer's
// own (run_train_step: begin, forward and backward per micro-batch, the loss summed over the
// ranks, apply with global-norm clipping at --max-grad-norm and AdamW with fp32 masters). Every
// setting not given here is a job's default (normalize_job_spec of an empty spec), the learning
// rate constant at --lr. This command parses the flags, traces the profiled step (CUPTI) and
// writes one JSON line on stdout, labelled with the model and hyperparameters it ran.
// --recompute auto is the daemon's policy: no recomputation where the memory planner says that
// fits this GPU. --fsdp is accepted and changes nothing (every run is the sharded engine).
// --adapter lora trains a LoRA adapter (every projection by default, PEFT's initialisation) on
// the frozen bf16 base, as a LoRA job does; MFU then counts 4N per token for the frozen weights
// (forward and input gradient) and 6N for the adapter's.
//
// --world-size N: one process per GPU (rank R uses the first visible device; rendezvous through
// the folder DIR); --micro-batches K per rank, so runs at different world sizes with the same
// world_size * K see the same documents per step and can be compared loss for loss
// (--sample-out: every S-th element of every parameter's fp32 master after the last step, raw
// float32, written by rank 0). The profiled step's NCCL kernels against the compute kernels give
// the exposed communication time; the memory planner's prediction is printed beside the peak.
// --timeout-ms bounds every collective (the communicator aborts, the rank exits 1 at once) and,
// doubled, the time between two signs of progress (the engine's watchdog ends a stuck rank).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "daemon/config/job_yaml.h"
#include "daemon/config/spec_to_config.h"
#include "daemon/rank/step_trace.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/model/lora.h"
#include "runtime/train/benchmark.h"

namespace deltatune::cli {

namespace {

// A job's training settings with every default filled from the one table
// (normalize_job_spec), so the bench steps as a job with an empty spec would.
TrainConfig job_defaults() {
    v1::JobSpec spec;
    spec.mutable_hyperparameters()->set_max_steps(1);
    daemon::normalize_job_spec(&spec);
    return train_config_from_spec(spec);
}

struct BenchOptions {
    std::string config;
    int64_t tokens = 8192, steps = 5, warmup = 2, layers = 0;
    std::string recompute = "layer";
    uint64_t seed = 0;
    AdamWHyper adamw = job_defaults().adamw;
    int64_t world = 1, rank = 0, micro = 1, timeout_ms = 120000, sample_stride = 4099;
    std::string rendezvous, sample_out;
    std::string trace_out;  // the profiled step's timeline (Chrome trace JSON), when set
    double max_grad_norm = job_defaults().max_grad_norm;
    std::optional<LoraSpec> lora;      // --adapter lora
    std::string workload = "all";      // every token labeled, or "chat" (kChatPromptFraction not)
    std::string projections = "bf16";  // or "fp8" (GpuRankOptions::fp8_projections)
};

// A job's settings (job_defaults) with the flags over them, the learning rate constant.
BenchmarkConfig benchmark_config(const BenchOptions& o) {
    BenchmarkConfig b;
    b.model_config = o.config;
    b.layers = o.layers;
    b.warmup = o.warmup, b.steps = o.steps;
    b.sample_stride = o.sample_out.empty() ? 0 : o.sample_stride;
    b.prompt_fraction = o.workload == "chat" ? kChatPromptFraction : 0;
    TrainConfig& c = b.train;
    c = job_defaults();
    c.tokens_per_batch = o.tokens;
    c.grad_accum = o.micro;
    c.lr.kind = LrScheduleKind::kConstant;
    c.lr.peak = o.adamw.lr, c.lr.warmup_steps = 0;
    c.adamw = o.adamw;
    c.max_grad_norm = o.max_grad_norm;
    c.lora = o.lora;
    c.seed = o.seed;
    GpuRankOptions& g = c.gpu;
    g.enabled = true;
    g.device = 0;  // the first visible device
    g.rank = static_cast<int>(o.rank), g.world_size = static_cast<int>(o.world);
    if (o.world > 1) g.store_dir = o.rendezvous;  // one rank meets itself in memory
    g.prefix = "bench";
    g.timeout = std::chrono::milliseconds(o.timeout_ms);
    g.recompute = o.recompute;
    g.fp8_projections = o.projections == "fp8";
    return b;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// What ran, from the model it trained and the settings it ran with.
std::string workload_label(const Qwen35Config& m, const TrainConfig& c) {
    const auto full =
        std::count(m.layer_types.begin(), m.layer_types.end(), LayerType::kFullAttention);
    return absl::StrCat(m.model_type, ": ", m.num_layers, " layers (", m.num_layers - full,
                        " linear attention, ", full, " full), hidden ", m.hidden_size,
                        ", intermediate ", m.intermediate_size, ", vocab ", m.vocab_size, "; ",
                        c.tokens_per_batch, "-token micro-batches, ", c.grad_accum, " per rank, ",
                        c.gpu.world_size, c.gpu.world_size == 1 ? " rank" : " ranks");
}

std::string optimizer_label(const AdamWHyper& h, bool adapter) {
    return absl::StrCat("adamw fp32 ", adapter ? "adapter" : "masters", " (betas ", h.beta1, "/",
                        h.beta2, ", eps ", h.eps, ", wd ", h.weight_decay, ")");
}

// The JSON line's settings (those it ran with) and timed figures (medians over the timed steps).
nlohmann::json result_json(const BenchOptions& o, const TrainConfig& c, const BenchmarkResult& r) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    auto gib = [&](int64_t bytes) { return static_cast<double>(bytes) / kGiB; };
    return {
        {"workload", workload_label(r.model, c)},
        {"data", o.workload == "chat" ? absl::StrCat("chat: the first ", kChatPromptFraction,
                                                     " of each document unlabeled")
                                      : std::string("every token labeled")},
        {"layers", r.model.num_layers},
        {"recompute", r.recompute},
        {"projections", o.projections},
        {"recompute_requested", o.recompute},
        {"kept_layers", r.kept_layers},        // layers whose activations stay
        {"path", "train-engine " + r.engine},  // what daemon jobs run (runtime/train)
        {"world_size", o.world},
        {"rank", o.rank},
        {"micro_batches_per_rank", o.micro},
        {"tokens_per_batch_budget", o.tokens},
        {"mean_real_tokens_per_rank_step", r.timed_tokens / static_cast<double>(o.steps)},
        {"steps", o.steps},
        {"warmup", o.warmup},
        {"tokens_per_s", median(r.tokens_per_s)},
        {"step_ms", median(r.step_ms)},
        {"host_enqueue_ms", median(r.host_enqueue_ms)},
        // What the GEMM wrapper costs the host per timed step (and the profiled one).
        {"gemm_calls_per_step", r.gemm_calls_per_step},
        {"gemm_heuristic_queries_per_step", r.gemm_heuristic_queries_per_step},
        {"gemm_host_ms_per_step", r.gemm_host_ms_per_step},
        {"mfu", median(r.mfu)},
        {"optimizer", optimizer_label(c.adamw, c.lora.has_value())},
        {"adapter", c.lora ? nlohmann::json{{"type", "lora"},
                                            {"rank", c.lora->rank},
                                            {"alpha", c.lora->alpha},
                                            {"parameters", r.adapter_params}}
                           : nlohmann::json(nullptr)},
        {"max_grad_norm", c.max_grad_norm},
        {"lr", c.lr.peak},  // constant
        {"losses", r.losses},
        {"grad_norms", r.grad_norms},
        {"loss_last", r.losses.back()},
        {"peak_memory_gib", gib(r.peak_device_bytes)},
        {"device_used_gib_cudaMemGetInfo", gib(r.device_used_bytes)},
        {"planner_peak_gib", gib(r.planner_peak_bytes)},
        {"planner", r.planner},
        {"gdn_impl", r.gdn_impl},
        {"init_s", r.init_s},
        {"comm_bytes_per_step_gib", gib(r.comm_bytes_per_step)},
        {"shard_params", r.shard_params},
        {"replicated_params", r.replicated_params},
    };
}

// The profiled step's kernels (when CUPTI traced it) into `j`.
void add_trace_figures(const daemon::StepTrace& trace, const BenchmarkResult& r,
                       nlohmann::json& j) {
    using daemon::uncovered_ms;
    using daemon::union_ms;
    if (trace.compute.empty()) return;
    const double profiled_ms = r.profiled_step_ms;
    j["kernel_launches_per_step"] = static_cast<int64_t>(trace.compute.size());
    j["kernel_launches_per_layer"] =
        static_cast<double>(trace.compute.size()) / static_cast<double>(r.model.num_layers);
    j["memcpy_memset_per_step"] = static_cast<int64_t>(trace.memory.size());
    j["compute_kernel_busy_ms_profiled_step"] = union_ms(trace.compute);
    // The profiled step trains a batch of its own (new shapes, as a job's steps do): compare
    // its GPU-busy time with its own wall time, not with the timed steps' median.
    j["profiled_step_ms"] = profiled_ms;
    j["profiled_step_tokens"] = r.profiled_step_tokens;
    j["nccl_kernels_per_step"] = static_cast<int64_t>(trace.comm.size());
    j["nccl_kernel_ms_profiled_step"] = union_ms(trace.comm);
    j["exposed_comm_ms_profiled_step"] = uncovered_ms(trace.comm, trace.compute);
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [name, launches, ms] : daemon::top_kernels(trace, 25)) {
        top.push_back({{"kernel", name}, {"launches", launches}, {"ms", ms}});
    }
    j["top_kernels_profiled_step"] = top;
    // Where the profiled step's time goes: kernel time by part, memsets and copies while no
    // kernel runs, and what nothing covers (host waits and gaps between kernels).
    nlohmann::json parts = daemon::kernel_ms_by_part(trace);
    std::vector<std::pair<uint64_t, uint64_t>> busy = trace.compute;
    busy.insert(busy.end(), trace.memory.begin(), trace.memory.end());
    parts["memset_memcpy"] = uncovered_ms(trace.memory, trace.compute);
    const double idle = profiled_ms - union_ms(busy);
    parts["idle"] = idle;
    j["step_breakdown_ms_profiled_step"] = parts;
    j["host_wait_share_profiled_step"] = profiled_ms > 0 ? idle / profiled_ms : 0.0;
}

// --sample-out (rank 0) and --trace-out (one file per rank).
absl::Status write_outputs(const BenchOptions& o, const BenchmarkResult& r,
                           const daemon::StepTrace& trace) {
    if (!o.sample_out.empty() && o.rank == 0) {
        std::FILE* f = std::fopen(o.sample_out.c_str(), "wb");
        if (!f ||
            std::fwrite(r.sample.data(), sizeof(float), r.sample.size(), f) != r.sample.size()) {
            if (f) std::fclose(f);
            return absl::UnavailableError("cannot write " + o.sample_out);
        }
        std::fclose(f);
    }
    if (!o.trace_out.empty()) {
        const std::string path =
            o.world > 1 ? absl::StrCat(o.trace_out, ".rank", o.rank) : o.trace_out;
        std::ofstream out(path);
        out << daemon::chrome_trace_json(trace, absl::StrCat("deltatune bench, rank ", o.rank));
        if (!out) return absl::UnavailableError("cannot write " + path);
    }
    return absl::OkStatus();
}

// The benchmark with its profiled step traced; the JSON line.
absl::StatusOr<nlohmann::json> run_bench(const BenchOptions& o) {
    daemon::StepTrace trace;
    trace.keep_events = !o.trace_out.empty();  // also every memory op and runtime call
    BenchmarkHooks hooks;
    hooks.before_profiled_step = [&] {
        if (!daemon::start_trace(&trace).ok()) trace = daemon::StepTrace{};
    };
    hooks.after_profiled_step = [] { daemon::stop_trace(); };
    // A failed collective aborted the communicator: report at once and end the process, as
    // tearing down streams that hold never-ending collectives may block.
    hooks.on_abort = [&](const absl::Status& s) {
        std::fprintf(stderr, "deltatune bench: rank %lld: %s\n", static_cast<long long>(o.rank),
                     std::string(s.message()).c_str());
        std::fflush(stderr);
        std::_Exit(1);
    };
    const BenchmarkConfig config = benchmark_config(o);
    DT_ASSIGN_OR_RETURN(const BenchmarkResult r, run_benchmark(config, hooks));
    DT_RETURN_IF_ERROR(write_outputs(o, r, trace));
    nlohmann::json j = result_json(o, config.train, r);
    add_trace_figures(trace, r, j);
    return j;
}

// The flags as given; parse_bench_options checks how they relate.
struct BenchFlags {
    std::string config, recompute = "layer", rendezvous, sample_out, trace_out, adapter,
                        lora_targets, workload = "all", projections = "bf16";
    uint64_t tokens = 8192, steps = 5, warmup = 2, layers = 0, seed = 0, world = 1, rank = 0,
             micro = 1, timeout_ms = 120000, stride = 4099, lora_rank = 16;
    double lr = job_defaults().lr.peak, max_grad_norm = job_defaults().max_grad_norm;
    std::optional<double> lora_alpha;
    bool fsdp = false;
};

void declare_bench_flags(CLI::App& app, BenchFlags& f) {
    const auto count = [&app](const char* name, uint64_t& value, const char* help) {
        return daemon::add_count(app, name, value, help);
    };
    app.add_option("--config", f.config, "the model's Hugging Face config.json")
        ->required()
        ->type_name("CONFIG.json");
    count("--tokens", f.tokens, "tokens of one packed micro-batch (>= 16)");
    count("--steps", f.steps, "timed steps (>= 1)");
    count("--warmup", f.warmup, "steps before the timed ones");
    daemon::one_of(app.add_option("--recompute", f.recompute,
                                  "activation recomputation; auto: none where the memory planner "
                                  "says that fits this GPU"),
                   {"layer", "none", "auto"});
    count("--seed", f.seed, "the random model's and batches' seed");
    daemon::one_of(app.add_option("--workload", f.workload,
                                  "all: every token labeled; chat: the first 30% of each "
                                  "document unlabeled, as a chat SFT's prompts"),
                   {"all", "chat"});
    daemon::one_of(app.add_option("--projections", f.projections,
                                  "the linear projections' GEMMs: bf16, or fp8 (e4m3 activations "
                                  "and weights, e5m2 gradients, per-row scales; Hopper)"),
                   {"bf16", "fp8"});
    count("--layers", f.layers, "that many layers, in the config's pattern (0: the config's)");
    app.add_option("--lr", f.lr, "learning rate, constant")
        ->check(daemon::number())
        ->type_name("X");
    app.add_option("--max-grad-norm", f.max_grad_norm, "clip the global gradient norm (0: off)")
        ->check(daemon::number())
        ->type_name("X");
    app.add_flag("--fsdp", f.fsdp, "accepted; every run is the sharded engine");
    const std::string ranks = "Several GPUs (one process each)";
    count("--world-size", f.world, "processes, one per GPU")->group(ranks);
    count("--rank", f.rank, "this process's rank (it takes the first visible GPU)")->group(ranks);
    app.add_option("--rendezvous", f.rendezvous, "the folder the ranks meet in")
        ->type_name("DIR")
        ->group(ranks);
    count("--micro-batches", f.micro, "micro-batches per rank and step (>= 1)")->group(ranks);
    count("--timeout-ms", f.timeout_ms,
          "bound on every collective; doubled, on the time without progress")
        ->group(ranks);
    const std::string outputs = "Outputs";
    app.add_option("--sample-out", f.sample_out,
                   "every S-th element of every fp32 master after the last step (raw float32)")
        ->type_name("FILE")
        ->group(outputs);
    count("--sample-stride", f.stride, "S for --sample-out (>= 1)")->group(outputs);
    app.add_option("--trace-out", f.trace_out, "the profiled step's timeline (Chrome trace JSON)")
        ->type_name("FILE")
        ->group(outputs);
    const std::string lora = "LoRA (--adapter lora: every projection, alpha twice the rank)";
    daemon::one_of(
        app.add_option("--adapter", f.adapter, "train a LoRA adapter on the frozen base"), {"lora"})
        ->group(lora);
    count("--lora-rank", f.lora_rank, "the adapter's rank (>= 1)")->group(lora);
    app.add_option_function<double>(
           "--lora-alpha", [&f](const double& a) { f.lora_alpha = a; }, "default: twice the rank")
        ->check(daemon::number())
        ->type_name("A")
        ->group(lora);
    app.add_option("--lora-targets", f.lora_targets, "the projections to adapt")
        ->type_name("m,...")
        ->group(lora);
}

// --adapter lora [--lora-rank R] [--lora-alpha A] [--lora-targets m1,m2]: every projection by
// default, alpha twice the rank (PEFT's common choice).
absl::StatusOr<std::optional<LoraSpec>> parse_bench_lora(const BenchFlags& f) {
    if (f.adapter.empty()) return std::optional<LoraSpec>();
    LoraSpec s;
    if (f.lora_rank < 1) return absl::InvalidArgumentError("--lora-rank must be >= 1");
    s.rank = static_cast<int64_t>(f.lora_rank);
    s.alpha = f.lora_alpha.value_or(2.0 * static_cast<double>(f.lora_rank));
    std::vector<std::string> modules;
    for (size_t i = 0; i < kNumProj; ++i) modules.push_back(proj_module_name(static_cast<Proj>(i)));
    if (!f.lora_targets.empty()) modules = absl::StrSplit(f.lora_targets, ',');
    DT_ASSIGN_OR_RETURN(s.targets, parse_lora_targets(modules));
    return std::optional<LoraSpec>(s);
}

absl::StatusOr<BenchOptions> parse_bench_options(const BenchFlags& f) {
    BenchOptions o;
    o.config = f.config;
    o.seed = f.seed;
    o.adamw.lr = f.lr;
    o.recompute = f.recompute;
    o.workload = f.workload;
    o.projections = f.projections;
    o.max_grad_norm = f.max_grad_norm;
    o.rendezvous = f.rendezvous;
    o.sample_out = f.sample_out;
    o.trace_out = f.trace_out;
    if (f.world < 1 || f.rank >= f.world) {
        return absl::InvalidArgumentError(
            absl::StrCat("--rank ", f.rank, " must be below --world-size ", f.world));
    }
    // --fsdp is what every run is now (the job's engine; at world size 1 one GPU): accepted.
    if (f.world > 1 && o.rendezvous.empty()) {
        return absl::InvalidArgumentError("--world-size > 1 needs --rendezvous DIR");
    }
    if (f.micro < 1 || f.stride < 1 || f.timeout_ms < 1) {
        return absl::InvalidArgumentError(
            "--micro-batches, --sample-stride and --timeout-ms must be >= 1");
    }
    if (o.max_grad_norm < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--max-grad-norm must be >= 0 (0: no clipping), got ", o.max_grad_norm));
    }
    DT_ASSIGN_OR_RETURN(o.lora, parse_bench_lora(f));
    if (o.lora && !o.sample_out.empty()) {  // the sample reads the base's fp32 masters
        return absl::InvalidArgumentError("--sample-out: not with --adapter (the base is frozen)");
    }
    o.world = static_cast<int64_t>(f.world), o.rank = static_cast<int64_t>(f.rank);
    o.micro = static_cast<int64_t>(f.micro), o.timeout_ms = static_cast<int64_t>(f.timeout_ms);
    o.sample_stride = static_cast<int64_t>(f.stride);
    if (f.tokens < 16 || f.steps < 1) {
        return absl::InvalidArgumentError("--tokens must be >= 16 and --steps >= 1");
    }
    o.tokens = static_cast<int64_t>(f.tokens), o.steps = static_cast<int64_t>(f.steps);
    o.warmup = static_cast<int64_t>(f.warmup), o.layers = static_cast<int64_t>(f.layers);
    return o;
}

}  // namespace

CommandRun bench_command(CLI::App& app) {
    auto flags = std::make_shared<BenchFlags>();
    declare_bench_flags(app, *flags);
    return [flags] {
        auto options = parse_bench_options(*flags);
        absl::StatusOr<nlohmann::json> j = options.ok() ? run_bench(*options) : options.status();
        if (!j.ok()) {
            return fail("bench", j.status());
        }
        std::printf("%s\n", j->dump().c_str());
        return 0;
    };
}

}  // namespace deltatune::cli
