// deltatune bench --config CONFIG.json [--tokens 8192] [--steps 5] [--warmup 2]
//                 [--recompute layer|none|auto] [--seed 0] [--layers N] [--lr 1e-5]
//                 [--world-size N --rank R --rendezvous DIR] [--micro-batches K]
//                 [--max-grad-norm 1.0] [--timeout-ms MS] [--sample-out FILE --sample-stride S]
//                 [--adapter lora --lora-rank 16 [--lora-alpha 32] [--lora-targets q_proj,...]]
// The headline training-step benchmark (the 27B-slice workload, docs/performance.md): it times
// the engine daemon jobs train with (runtime/train/train_engine_gpu.h: Qwen35GpuModel over
// FsdpGpuParams, FSDP over NCCL; world size 1 is one GPU), so its figure is what a job gets.
// Parameters are random-initialised on the GPU (nothing staged on the host); the batches are 1D
// packed from documents of lognormal(7.0, 0.5) lengths clipped to [16, tokens] (greedy, like the
// PyTorch peer's 1D batches; std::mt19937_64, so not the peer's exact lengths) with uniform
// random ids and every token trained. Each step is the trainer's: begin (zero gradients),
// forward and backward per micro-batch (the loss read back), apply (global gradient norm,
// clipping at --max-grad-norm, a job's default 1.0; 0 turns it off, AdamW with fp32 masters).
// One JSON line on stdout. --recompute auto is the daemon's policy: no recomputation where the
// memory planner says that fits this GPU. --fsdp is accepted and changes nothing (every run is
// the sharded engine). --adapter lora trains a LoRA adapter (every projection by default, PEFT's
// initialisation) on the frozen bf16 base, as a LoRA job does; MFU then counts 4N per token for
// the frozen weights (forward and input gradient) and 6N for the adapter's.
//
// --world-size N: one process per GPU (rank R uses the first visible device; rendezvous through
// the folder DIR). Every rank draws the same global batches; a step's global batch is
// world_size * K packed micro-batches, rank R taking micro-batches R*K .. R*K+K-1, so runs at
// different world sizes with the same world_size * K see the same documents per step and can be
// compared loss for loss (--sample-out: every S-th element of every parameter's fp32 master after
// the last step, raw float32, written by rank 0). The profiled step's NCCL kernels against the
// compute kernels give the exposed communication time; the memory planner's prediction is
// printed beside the peak. --timeout-ms bounds every collective (the communicator aborts, the
// rank exits 1 at once) and, doubled, the time between two signs of progress (the engine's
// watchdog ends a stuck rank).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/flags.h"
#include "daemon/cli/job_client.h"
#include "daemon/config/job_yaml.h"
#include "daemon/config/spec_to_config.h"
#include "daemon/rank/step_trace.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/device/device_context.h"
#include "runtime/device/gemm.h"
#include "runtime/model/lora.h"
#include "runtime/model/model_flops.h"
#include "runtime/model/qwen35_config.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/model/qwen35_params.h"
#include "runtime/train/memory_plan.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include "runtime/device/cuda_status.h"
#include "runtime/distributed/fsdp_gpu.h"
#include "runtime/distributed/progress_watchdog.h"
#include "runtime/model/gpu_blocks.h"
#include "runtime/train/train_engine_gpu.h"
#endif

namespace deltatune::cli {

using daemon::chrome_trace_json;
using daemon::kernel_ms_by_part;
using daemon::start_trace;
using daemon::StepTrace;
using daemon::stop_trace;
using daemon::top_kernels;
using daemon::uncovered_ms;
using daemon::union_ms;

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
    std::optional<LoraSpec> lora;  // --adapter lora
};

#if DELTATUNE_HAVE_CUDA
// Document lengths in batches of at most `budget` tokens, as bench_peer.py's batches_1d.
std::vector<std::vector<int64_t>> make_batches(int64_t count, int64_t budget,
                                               std::mt19937_64& rng) {
    auto uniform = [&]() { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
    std::vector<std::vector<int64_t>> out;
    std::vector<int64_t> cur;
    int64_t sum = 0;
    while (static_cast<int64_t>(out.size()) < count) {
        const double z = std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform());
        const int64_t len =
            std::clamp<int64_t>(static_cast<int64_t>(std::exp(7.0 + 0.5 * z)), 16, budget);
        if (!cur.empty() && sum + len > budget) {
            out.push_back(std::move(cur));
            cur.clear(), sum = 0;
        }
        cur.push_back(len), sum += len;
    }
    return out;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

#endif

#if DELTATUNE_HAVE_CUDA
// The NCCL id's rendezvous of a one-rank run: no folder needed.
class LocalStore final : public KeyValueStore {
  public:
    absl::Status set(const std::string& key, const std::string& value) override {
        values_[key] = value;
        return absl::OkStatus();
    }
    absl::StatusOr<std::optional<std::string>> get(const std::string& key) override {
        auto it = values_.find(key);
        if (it == values_.end()) return std::optional<std::string>();
        return std::optional<std::string>(it->second);
    }

  private:
    std::map<std::string, std::string> values_;
};

// The engine daemon jobs train with (runtime/train), parameters initialised on the device.
absl::StatusOr<std::unique_ptr<GpuTrainEngine>> make_engine(const BenchOptions& o,
                                                            const Qwen35Config& c,
                                                            ParamSet& adapters) {
    GpuRankOptions g;
    g.enabled = true;
    g.device = 0;
    g.rank = static_cast<int>(o.rank), g.world_size = static_cast<int>(o.world);
    if (o.world == 1) {
        g.store = std::make_shared<LocalStore>();
    } else {
        g.store_dir = o.rendezvous;
    }
    g.prefix = "bench";
    g.timeout = std::chrono::milliseconds(o.timeout_ms);
    g.recompute = o.recompute;
    g.tokens_per_batch = o.tokens;
    if (!o.lora) return GpuTrainEngine::create_random(c, g, o.seed);
    // The adapter as a LoRA job starts it (names and shapes from a base that is never filled).
    const ParamSet shapes = make_qwen35_params(c, c.tie_word_embeddings, /*zero_fill=*/false);
    adapters = make_lora_params(c, shapes, *o.lora);
    init_lora_params(adapters, o.seed);
    return GpuTrainEngine::create_random(c, g, o.seed, &adapters, o.lora->scale());
}
#endif

absl::StatusOr<nlohmann::json> run_bench(const BenchOptions& o) {
#if !DELTATUNE_HAVE_CUDA
    (void)o;
    return absl::FailedPreconditionError("built without CUDA (DELTATUNE_CUDA=OFF or no nvcc)");
#else
    DT_ASSIGN_OR_RETURN(Qwen35Config c, load_qwen35_config(o.config));
    if (o.layers > 0) {  // the published pattern (linear x3, full) continued past the config's list
        c.layer_types.resize(static_cast<size_t>(o.layers));
        for (int64_t l = 0; l < o.layers; ++l) {
            if (l >= c.num_layers) {
                c.layer_types[static_cast<size_t>(l)] =
                    (l + 1) % 4 ? LayerType::kLinearAttention : LayerType::kFullAttention;
            }
        }
        c.num_layers = o.layers;
    }
    const int64_t total_steps = o.warmup + o.steps + 1;  // + one profiled step
    const int64_t per_step = o.world * o.micro;          // micro-batches in a global batch
    std::mt19937_64 rng(o.seed);
    const auto lens = make_batches(total_steps * per_step, o.tokens, rng);
    // Every rank draws every batch (the same random stream) and packs only its own.
    std::vector<PackedBatch> batches;
    std::vector<double> step_labels(static_cast<size_t>(total_steps), 0.0);
    for (size_t i = 0; i < lens.size(); ++i) {
        const int64_t step = static_cast<int64_t>(i) / per_step;
        const int64_t owner = static_cast<int64_t>(i) % per_step / o.micro;
        std::vector<Document> docs;
        for (int64_t len : lens[i]) {
            Document d;
            d.input_ids.resize(static_cast<size_t>(len));
            for (auto& id : d.input_ids) id = static_cast<int32_t>(rng() % c.vocab_size);
            d.labels = d.input_ids;
            docs.push_back(std::move(d));
        }
        DT_ASSIGN_OR_RETURN(PackedBatch p, pack_documents(docs, c.vocab_size));
        step_labels[static_cast<size_t>(step)] += static_cast<double>(p.label_tokens());
        if (owner == o.rank) batches.push_back(std::move(p));
    }

    // The engine's own watchdog ends a rank that stops making progress (a dead peer).
    const auto t_init = std::chrono::steady_clock::now();
    ParamSet adapters;  // --adapter lora: outlives the engine
    DT_ASSIGN_OR_RETURN(std::unique_ptr<GpuTrainEngine> engine, make_engine(o, c, adapters));
    const int64_t adapter_params = adapters.numel();  // 0 without --adapter
    GpuTrainEngine& eng = *engine;
    const double init_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_init).count();
    const Recompute recompute = eng.recompute_policy();
    // A failed collective aborted the communicator: report at once and end the process, as
    // tearing down streams that hold never-ending collectives may block.
    auto fail_fast = [&](const absl::Status& s) {
        if (!s.ok() && eng.nccl().aborted()) {
            std::fprintf(stderr, "deltatune bench: rank %lld: %s\n", static_cast<long long>(o.rank),
                         std::string(s.message()).c_str());
            std::fflush(stderr);
            std::_Exit(1);
        }
        return s;
    };
    StepTrace trace;
    std::vector<double> step_ms, tok_s, mfu, losses, norms, enqueue_ms;
    Gemm::HostStats gemm_before;  // at the first timed step
    double profiled_ms = 0, profiled_tokens = 0;
    trace.keep_events = !o.trace_out.empty();  // also every memory op and runtime call
    for (int64_t i = 0; i < total_steps; ++i) {
        const bool profiled = i == total_steps - 1;
        if (profiled && !start_trace(&trace).ok()) trace = StepTrace{};
        DT_RETURN_IF_ERROR(fail_fast(eng.fsdp().synchronize()));
        if (i == o.warmup) gemm_before = eng.device().gemm()->host_stats();
        const auto t0 = std::chrono::steady_clock::now();
        // As trainer.cc runs a step: begin, forward and backward per micro-batch, apply.
        DT_RETURN_IF_ERROR(fail_fast(eng.begin_step()));
        const int64_t global_labels = static_cast<int64_t>(step_labels[static_cast<size_t>(i)]);
        double loss_sum = 0, tokens = 0, flops = 0;
        for (int64_t k = 0; k < o.micro; ++k) {
            const size_t at = static_cast<size_t>(i * o.micro + k);
            const PackedBatch& b = batches[at];
            absl::StatusOr<double> loss = eng.forward_backward(b, global_labels, k == o.micro - 1);
            DT_RETURN_IF_ERROR(fail_fast(loss.status()));
            loss_sum += *loss;
            tokens += static_cast<double>(b.tokens());
            flops += step_flops(c, lens[static_cast<size_t>(i * per_step + o.rank * o.micro + k)],
                                adapter_params);
        }
        absl::StatusOr<double> norm = eng.apply(o.adamw, o.max_grad_norm);
        DT_RETURN_IF_ERROR(fail_fast(norm.status()));
        const auto t_enqueued = std::chrono::steady_clock::now();
        DT_RETURN_IF_ERROR(fail_fast(eng.fsdp().synchronize()));
        const auto t1 = std::chrono::steady_clock::now();
        DT_RETURN_IF_ERROR(fail_fast(eng.comm().all_reduce_sum(&loss_sum, 1)));
        losses.push_back(loss_sum / step_labels[static_cast<size_t>(i)]);
        norms.push_back(*norm);
        if (profiled) {
            stop_trace();
            profiled_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
            profiled_tokens = tokens;
            continue;
        }
        if (i < o.warmup) continue;
        const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
        step_ms.push_back(ms);
        // The host's share: until it has enqueued the whole step (it waits inside for the
        // forward's loss and the gradient norm); close to step_ms means the GPU waits for it.
        enqueue_ms.push_back(std::chrono::duration<double, std::milli>(t_enqueued - t0).count());
        tok_s.push_back(tokens / (ms * 1e-3));
        mfu.push_back(flops / (ms * 1e-3) / dense_bf16_peak_flops(eng.device().sm_version()));
    }
    if (!o.sample_out.empty()) {
        DT_ASSIGN_OR_RETURN(std::vector<float> sample, eng.fsdp().download_sample(o.sample_stride));
        if (o.rank == 0) {
            std::FILE* f = std::fopen(o.sample_out.c_str(), "wb");
            if (!f ||
                std::fwrite(sample.data(), sizeof(float), sample.size(), f) != sample.size()) {
                if (f) std::fclose(f);
                return absl::UnavailableError("cannot write " + o.sample_out);
            }
            std::fclose(f);
        }
    }
    if (!o.trace_out.empty()) {  // one file per rank
        const std::string path =
            o.world > 1 ? absl::StrCat(o.trace_out, ".rank", o.rank) : o.trace_out;
        std::ofstream out(path);
        out << chrome_trace_json(trace, absl::StrCat("deltatune bench, rank ", o.rank));
        if (!out) return absl::UnavailableError("cannot write " + path);
    }
    size_t free_b = 0, total_b = 0;
    DT_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));

    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    const Gemm::HostStats gemm_after = eng.device().gemm()->host_stats();
    auto per_step_delta = [&](int64_t before, int64_t after) {
        return static_cast<double>(after - before) / static_cast<double>(o.steps + 1);
    };
    double tokens_total = 0;
    for (int64_t i = o.warmup; i < o.warmup + o.steps; ++i) {
        for (int64_t k = 0; k < o.micro; ++k)
            tokens_total +=
                static_cast<double>(batches[static_cast<size_t>(i * o.micro + k)].tokens());
    }
    const MemoryPlan& plan = eng.memory_plan();  // the engine's, at its world size and tokens
    nlohmann::json j = {
        {"workload", "27B-slice"},
        {"layers", c.num_layers},
        {"recompute", recompute_name(recompute)},
        {"recompute_requested", o.recompute},
        {"kept_layers", eng.model().kept_layers()},  // layers whose activations stay
        {"path", "train-engine " + eng.name()},      // what daemon jobs run (runtime/train)
        {"world_size", o.world},
        {"rank", o.rank},
        {"micro_batches_per_rank", o.micro},
        {"tokens_per_batch_budget", o.tokens},
        {"mean_real_tokens_per_rank_step", tokens_total / static_cast<double>(o.steps)},
        {"steps", o.steps},
        {"warmup", o.warmup},
        {"tokens_per_s", median(tok_s)},
        {"step_ms", median(step_ms)},
        {"host_enqueue_ms", median(enqueue_ms)},
        // What the GEMM wrapper costs the host per timed step (and the profiled one).
        {"gemm_calls_per_step", per_step_delta(gemm_before.calls, gemm_after.calls)},
        {"gemm_heuristic_queries_per_step",
         per_step_delta(gemm_before.heuristic_queries, gemm_after.heuristic_queries)},
        {"gemm_host_ms_per_step", per_step_delta(gemm_before.host_ns, gemm_after.host_ns) * 1e-6},
        {"mfu", median(mfu)},
        {"optimizer", absl::StrCat("adamw fp32 masters (betas ", o.adamw.beta1, "/", o.adamw.beta2,
                                   ", eps ", o.adamw.eps, ", wd ", o.adamw.weight_decay, ")")},
        {"adapter", o.lora ? nlohmann::json{{"type", "lora"},
                                            {"rank", o.lora->rank},
                                            {"alpha", o.lora->alpha},
                                            {"parameters", adapter_params}}
                           : nlohmann::json(nullptr)},
        {"max_grad_norm", o.max_grad_norm},
        {"lr", o.adamw.lr},
        {"losses", losses},
        {"grad_norms", norms},
        {"loss_last", losses.back()},
        {"peak_memory_gib", static_cast<double>(eng.model().peak_device_bytes()) / kGiB},
        {"device_used_gib_cudaMemGetInfo", static_cast<double>(total_b - free_b) / kGiB},
        {"planner_peak_gib", static_cast<double>(plan.peak_bytes) / kGiB},
        {"planner", plan.describe()},
        {"gdn_impl", gpu_gdn_fused(c, eng.device().sm_version())
                         ? "fused: kernels/causal_conv1d.cu, gated_delta_rule*.cu, gated_rmsnorm.cu"
                         : "kernels/gdn_simple.cu (not the fused causal_conv1d/gated_delta_rule "
                           "kernels)"},
        {"init_s", init_s},
    };
    j["comm_bytes_per_step_gib"] = static_cast<double>(eng.fsdp().comm_bytes_per_step()) / kGiB;
    j["shard_params"] = eng.fsdp().shard_numel();
    j["replicated_params"] = eng.fsdp().replicated_numel();
    if (!trace.compute.empty()) {
        j["kernel_launches_per_step"] = static_cast<int64_t>(trace.compute.size());
        j["kernel_launches_per_layer"] =
            static_cast<double>(trace.compute.size()) / static_cast<double>(c.num_layers);
        j["memcpy_memset_per_step"] = static_cast<int64_t>(trace.memory.size());
        j["compute_kernel_busy_ms_profiled_step"] = union_ms(trace.compute);
        // The profiled step trains a batch of its own (new shapes, as a job's steps do): compare
        // its GPU-busy time with its own wall time, not with the timed steps' median.
        j["profiled_step_ms"] = profiled_ms;
        j["profiled_step_tokens"] = profiled_tokens;
        j["nccl_kernels_per_step"] = static_cast<int64_t>(trace.comm.size());
        j["nccl_kernel_ms_profiled_step"] = union_ms(trace.comm);
        j["exposed_comm_ms_profiled_step"] = uncovered_ms(trace.comm, trace.compute);
        nlohmann::json top = nlohmann::json::array();
        for (const auto& [name, launches, ms] : top_kernels(trace, 25)) {
            top.push_back({{"kernel", name}, {"launches", launches}, {"ms", ms}});
        }
        j["top_kernels_profiled_step"] = top;
        // Where the profiled step's time goes: kernel time by part, memsets and copies while no
        // kernel runs, and what nothing covers (host waits and gaps between kernels).
        nlohmann::json parts = kernel_ms_by_part(trace);
        std::vector<std::pair<uint64_t, uint64_t>> busy = trace.compute;
        busy.insert(busy.end(), trace.memory.begin(), trace.memory.end());
        parts["memset_memcpy"] = uncovered_ms(trace.memory, trace.compute);
        const double idle = profiled_ms - union_ms(busy);
        parts["idle"] = idle;
        j["step_breakdown_ms_profiled_step"] = parts;
        j["host_wait_share_profiled_step"] = profiled_ms > 0 ? idle / profiled_ms : 0.0;
    }
    return j;
#endif
}

// --adapter lora [--lora-rank R] [--lora-alpha A] [--lora-targets m1,m2]: every projection by
// default, alpha twice the rank (PEFT's common choice).
absl::StatusOr<std::optional<LoraSpec>> parse_bench_lora(const Flags& f) {
    const std::string type = f.get("adapter", "");
    if (type.empty()) return std::optional<LoraSpec>();
    if (type != "lora") {
        return absl::InvalidArgumentError(
            absl::StrCat("--adapter: expected lora, got '", type, "'"));
    }
    LoraSpec s;
    DT_ASSIGN_OR_RETURN(uint64_t rank, f.get_uint("lora-rank", 16));
    if (rank < 1) return absl::InvalidArgumentError("--lora-rank must be >= 1");
    s.rank = static_cast<int64_t>(rank);
    DT_ASSIGN_OR_RETURN(s.alpha, f.get_double("lora-alpha", 2.0 * static_cast<double>(rank)));
    std::vector<std::string> modules;
    for (size_t i = 0; i < kNumProj; ++i) modules.push_back(proj_module_name(static_cast<Proj>(i)));
    const std::string list = f.get("lora-targets", "");
    if (!list.empty()) modules = absl::StrSplit(list, ',');
    DT_ASSIGN_OR_RETURN(s.targets, parse_lora_targets(modules));
    return std::optional<LoraSpec>(s);
}

absl::StatusOr<BenchOptions> parse_bench_options(const std::vector<std::string>& args) {
    DT_ASSIGN_OR_RETURN(
        Flags f, Flags::parse(args, {"config",        "tokens",     "steps",      "warmup",
                                     "recompute",     "seed",       "layers",     "lr",
                                     "world-size",    "rank",       "rendezvous", "micro-batches",
                                     "max-grad-norm", "timeout-ms", "sample-out", "sample-stride",
                                     "adapter",       "lora-rank",  "lora-alpha", "lora-targets",
                                     "trace-out"},
                              {"fsdp"}));
    BenchOptions o;
    DT_ASSIGN_OR_RETURN(o.config, f.require("config"));
    DT_ASSIGN_OR_RETURN(uint64_t tokens, f.get_uint("tokens", 8192));
    DT_ASSIGN_OR_RETURN(uint64_t steps, f.get_uint("steps", 5));
    DT_ASSIGN_OR_RETURN(uint64_t warmup, f.get_uint("warmup", 2));
    DT_ASSIGN_OR_RETURN(uint64_t layers, f.get_uint("layers", 0));
    DT_ASSIGN_OR_RETURN(o.seed, f.get_uint("seed", 0));
    DT_ASSIGN_OR_RETURN(o.adamw.lr, f.get_double("lr", job_defaults().lr.peak));
    o.recompute = f.get("recompute", "layer");
    if (o.recompute != "layer" && o.recompute != "none" && o.recompute != "auto") {
        return absl::InvalidArgumentError(
            absl::StrCat("--recompute: expected layer, none or auto, got '", o.recompute, "'"));
    }
    DT_ASSIGN_OR_RETURN(uint64_t world, f.get_uint("world-size", 1));
    DT_ASSIGN_OR_RETURN(uint64_t rank, f.get_uint("rank", 0));
    DT_ASSIGN_OR_RETURN(uint64_t micro, f.get_uint("micro-batches", 1));
    DT_ASSIGN_OR_RETURN(uint64_t timeout, f.get_uint("timeout-ms", 120000));
    DT_ASSIGN_OR_RETURN(uint64_t stride, f.get_uint("sample-stride", 4099));
    DT_ASSIGN_OR_RETURN(o.max_grad_norm, f.get_double("max-grad-norm", o.max_grad_norm));
    o.rendezvous = f.get("rendezvous", "");
    o.sample_out = f.get("sample-out", "");
    o.trace_out = f.get("trace-out", "");
    if (world < 1 || rank >= world) {
        return absl::InvalidArgumentError(
            absl::StrCat("--rank ", rank, " must be below --world-size ", world));
    }
    // --fsdp is what every run is now (the job's engine; at world size 1 one GPU): accepted.
    if (world > 1 && o.rendezvous.empty()) {
        return absl::InvalidArgumentError("--world-size > 1 needs --rendezvous DIR");
    }
    if (micro < 1 || stride < 1 || timeout < 1) {
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
    o.world = static_cast<int64_t>(world), o.rank = static_cast<int64_t>(rank);
    o.micro = static_cast<int64_t>(micro), o.timeout_ms = static_cast<int64_t>(timeout);
    o.sample_stride = static_cast<int64_t>(stride);
    if (tokens < 16 || steps < 1) {
        return absl::InvalidArgumentError("--tokens must be >= 16 and --steps >= 1");
    }
    o.tokens = static_cast<int64_t>(tokens), o.steps = static_cast<int64_t>(steps);
    o.warmup = static_cast<int64_t>(warmup), o.layers = static_cast<int64_t>(layers);
    return o;
}

}  // namespace

int bench_command(const std::vector<std::string>& args) {
    auto options = parse_bench_options(args);
    absl::StatusOr<nlohmann::json> j = options.ok() ? run_bench(*options) : options.status();
    if (!j.ok()) {
        return fail("bench", j.status());
    }
    std::printf("%s\n", j->dump().c_str());
    return 0;
}

}  // namespace deltatune::cli
