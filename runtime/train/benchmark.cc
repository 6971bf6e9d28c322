// The training-step benchmark (benchmark.h): synthetic data, the job's GPU engine, the trainer's
// step, timed.
#include "runtime/train/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "runtime/base/status_macros.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <optional>
#include <span>

#include "runtime/device/cuda_status.h"
#include "runtime/device/gemm.h"
#include "runtime/model/gpu_blocks.h"
#include "runtime/model/lora.h"
#include "runtime/model/model_flops.h"
#include "runtime/model/qwen35_params.h"
#include "runtime/train/train_engine_gpu.h"
#include "runtime/train/train_step.h"
#endif

namespace deltatune {

namespace {

// Document lengths in batches of at most `budget` tokens, as the peer's batches_1d.
std::vector<std::vector<int64_t>> document_lengths(int64_t count, int64_t budget,
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

}  // namespace

absl::StatusOr<SyntheticSteps> synthetic_steps(const Qwen35Config& model, int64_t steps,
                                               int64_t grad_accum, int world_size, int rank,
                                               int64_t tokens_per_batch, uint64_t seed,
                                               double prompt_fraction) {
    const int64_t per_step = world_size * grad_accum;  // micro-batches in a global batch
    std::mt19937_64 rng(seed);
    const auto lens = document_lengths(steps * per_step, tokens_per_batch, rng);
    SyntheticSteps out;
    out.global_labels.assign(static_cast<size_t>(steps), 0);
    for (size_t i = 0; i < lens.size(); ++i) {
        const int64_t step = static_cast<int64_t>(i) / per_step;
        const int64_t owner = static_cast<int64_t>(i) % per_step / grad_accum;
        std::vector<Document> docs;
        for (int64_t len : lens[i]) {
            Document d;
            d.input_ids.resize(static_cast<size_t>(len));
            for (auto& id : d.input_ids) id = static_cast<int32_t>(rng() % model.vocab_size);
            d.labels = d.input_ids;
            const auto prompt = static_cast<size_t>(prompt_fraction * static_cast<double>(len));
            std::fill(d.labels.begin(), d.labels.begin() + prompt, -100);
            docs.push_back(std::move(d));
        }
        DT_ASSIGN_OR_RETURN(PackedBatch p, pack_documents(docs, model.vocab_size));
        out.global_labels[static_cast<size_t>(step)] += p.label_tokens();
        if (owner != rank) continue;
        out.batches.push_back(std::move(p));
        out.doc_lengths.push_back(lens[i]);
    }
    return out;
}

Qwen35Config with_layers(Qwen35Config model, int64_t layers) {
    model.layer_types.resize(static_cast<size_t>(layers));
    for (int64_t l = model.num_layers; l < layers; ++l) {
        model.layer_types[static_cast<size_t>(l)] =
            (l + 1) % 4 ? LayerType::kLinearAttention : LayerType::kFullAttention;
    }
    model.num_layers = layers;
    return model;
}

#if !DELTATUNE_HAVE_CUDA

absl::StatusOr<BenchmarkResult> run_benchmark(const BenchmarkConfig&, const BenchmarkHooks&) {
    return absl::FailedPreconditionError("built without CUDA (DELTATUNE_CUDA=OFF or no nvcc)");
}

#else  // DELTATUNE_HAVE_CUDA

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

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

// The engine the trainer's setup makes for a job (GPU ranks as c.gpu says, tokens_per_batch for
// the memory planner), parameters initialised on the device; a LoRA adapter as a LoRA job
// starts it, its names and shapes from a base that is never filled.
absl::StatusOr<std::unique_ptr<GpuTrainEngine>> make_engine(const Qwen35Config& model,
                                                            const TrainConfig& c,
                                                            ParamSet& adapters) {
    GpuRankOptions g = c.gpu;
    g.enabled = true;
    g.tokens_per_batch = c.tokens_per_batch;
    if (g.world_size == 1 && !g.store && g.store_dir.empty())
        g.store = std::make_shared<LocalStore>();
    if (!c.lora) return GpuTrainEngine::create_random(model, g, c.seed);
    const ParamSet shapes = make_qwen35_params(model, model.tie_word_embeddings, false);
    adapters = make_lora_params(model, shapes, *c.lora);
    init_lora_params(adapters, c.seed);
    return GpuTrainEngine::create_random(model, g, c.seed, &adapters, c.lora->scale());
}

// What every step reads: the run's settings, its engine and its data.
struct Loop {
    const BenchmarkConfig& config;
    const BenchmarkHooks& hooks;
    GpuTrainEngine& engine;
    const SyntheticSteps& data;
    const Qwen35Config& model;
    int64_t adapter_params = 0;

    // A failed collective aborted the communicator: the hook hears of it first.
    absl::Status guard(const absl::Status& s) const {
        if (!s.ok() && engine.nccl().aborted()) hooks.on_abort(s);
        return s;
    }
};

struct StepTiming {
    double ms = 0;          // from an idle device to the last kernel
    double enqueue_ms = 0;  // until the host had enqueued the whole step
};

// Step i (0-based) through run_train_step; its loss and norm go into `r`.
absl::StatusOr<StepTiming> timed_step(const Loop& loop, int64_t i, BenchmarkResult& r) {
    const TrainConfig& c = loop.config.train;
    const auto k = static_cast<size_t>(c.grad_accum);
    const int64_t labels = loop.data.global_labels[static_cast<size_t>(i)];
    AdamWHyper hyper = c.adamw;
    hyper.lr = c.lr.at(i + 1);
    DT_RETURN_IF_ERROR(loop.guard(loop.engine.fsdp().synchronize()));
    const auto t0 = Clock::now();
    const std::span<const PackedBatch> micro =
        std::span<const PackedBatch>(loop.data.batches).subspan(static_cast<size_t>(i) * k, k);
    absl::StatusOr<StepResult> step =
        run_train_step(loop.engine, micro, labels, hyper, c.max_grad_norm, i + 1);
    DT_RETURN_IF_ERROR(loop.guard(step.status()));
    const auto t_enqueued = Clock::now();
    DT_RETURN_IF_ERROR(loop.guard(loop.engine.fsdp().synchronize()));
    const auto t1 = Clock::now();
    r.losses.push_back(step->loss_sum / static_cast<double>(labels));
    r.grad_norms.push_back(step->grad_norm);
    return StepTiming{ms_between(t0, t1), ms_between(t0, t_enqueued)};
}

// Warmup, timed and profiled steps; the timed steps' figures into `r`.
absl::Status run_steps(const Loop& loop, BenchmarkResult& r) {
    const BenchmarkConfig& b = loop.config;
    const int64_t k = b.train.grad_accum, total = b.warmup + b.steps + 1;
    const double peak_flops = dense_bf16_peak_flops(loop.engine.device().sm_version());
    Gemm::HostStats before;  // at the first timed step
    for (int64_t i = 0; i < total; ++i) {
        const bool profiled = i == total - 1;
        if (profiled) loop.hooks.before_profiled_step();
        if (i == b.warmup) before = loop.engine.device().gemm()->host_stats();
        DT_ASSIGN_OR_RETURN(const StepTiming t, timed_step(loop, i, r));
        double tokens = 0, flops = 0;
        for (int64_t m = i * k; m < (i + 1) * k; ++m) {
            tokens += static_cast<double>(loop.data.batches[static_cast<size_t>(m)].tokens());
            flops += step_flops(loop.model, loop.data.doc_lengths[static_cast<size_t>(m)],
                                loop.adapter_params);
        }
        if (profiled) {
            loop.hooks.after_profiled_step();
            r.profiled_step_ms = t.ms, r.profiled_step_tokens = tokens;
        } else if (i >= b.warmup) {
            r.step_ms.push_back(t.ms);
            r.host_enqueue_ms.push_back(t.enqueue_ms);
            r.tokens_per_s.push_back(tokens / (t.ms * 1e-3));
            r.mfu.push_back(flops / (t.ms * 1e-3) / peak_flops);
            r.timed_tokens += tokens;
        }
    }
    const Gemm::HostStats after = loop.engine.device().gemm()->host_stats();
    const auto per_step = [&](int64_t from, int64_t to) {
        return static_cast<double>(to - from) / static_cast<double>(b.steps + 1);
    };
    r.gemm_calls_per_step = per_step(before.calls, after.calls);
    r.gemm_heuristic_queries_per_step = per_step(before.heuristic_queries, after.heuristic_queries);
    r.gemm_host_ms_per_step = per_step(before.host_ns, after.host_ns) * 1e-6;
    return absl::OkStatus();
}

// What the engine says of itself after the steps: memory, shards, the kernels it chose.
absl::Status read_engine_figures(const Loop& loop, BenchmarkResult& r) {
    GpuTrainEngine& e = loop.engine;
    if (loop.config.sample_stride > 0) {
        DT_ASSIGN_OR_RETURN(r.sample, e.fsdp().download_sample(loop.config.sample_stride));
    }
    size_t free_b = 0, total_b = 0;
    DT_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
    r.device_used_bytes = static_cast<int64_t>(total_b - free_b);
    r.engine = e.name();
    r.recompute = recompute_name(e.recompute_policy());
    r.kept_layers = e.model().kept_layers();
    r.peak_device_bytes = e.model().peak_device_bytes();
    r.planner_peak_bytes = e.memory_plan().peak_bytes;  // at its world size and tokens
    r.planner = e.memory_plan().describe();
    r.gdn_impl = gpu_gdn_fused(loop.model, e.device().gpu())
                     ? "fused: kernels/gdn/causal_conv1d.cu, kernels/gdn/gdn_chunked*.cu, "
                       "kernels/norm/gated_rmsnorm.cu"
                     : "kernels/gdn/gdn_simple.cu (not the fused causal_conv1d/gdn_chunked "
                       "kernels)";
    r.comm_bytes_per_step = e.fsdp().comm_bytes_per_step();
    r.shard_params = e.fsdp().shard_numel();
    r.replicated_params = e.fsdp().replicated_numel();
    return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BenchmarkResult> run_benchmark(const BenchmarkConfig& b,
                                              const BenchmarkHooks& hooks) {
    if (b.train.grad_accum < 1 || b.steps < 1 || b.warmup < 0) {
        return absl::InvalidArgumentError(
            "benchmark: grad_accum and steps must be >= 1, warmup >= 0");
    }
    BenchmarkResult r;
    DT_ASSIGN_OR_RETURN(r.model, load_qwen35_config(b.model_config));
    if (b.layers > 0) r.model = with_layers(r.model, b.layers);
    DT_ASSIGN_OR_RETURN(const SyntheticSteps data,
                        synthetic_steps(r.model, b.warmup + b.steps + 1, b.train.grad_accum,
                                        b.train.gpu.world_size, b.train.gpu.rank,
                                        b.train.tokens_per_batch, b.train.seed, b.prompt_fraction));
    // The engine's own watchdog ends a rank that stops making progress (a dead peer).
    const auto t_init = Clock::now();
    ParamSet adapters;  // a LoRA adapter: outlives the engine
    DT_ASSIGN_OR_RETURN(std::unique_ptr<GpuTrainEngine> engine,
                        make_engine(r.model, b.train, adapters));
    r.init_s = std::chrono::duration<double>(Clock::now() - t_init).count();
    r.adapter_params = adapters.numel();  // 0 without an adapter
    const Loop loop{b, hooks, *engine, data, r.model, r.adapter_params};
    DT_RETURN_IF_ERROR(run_steps(loop, r));
    DT_RETURN_IF_ERROR(read_engine_figures(loop, r));
    return r;
}

#endif  // DELTATUNE_HAVE_CUDA

}  // namespace deltatune
