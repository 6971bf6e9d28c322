// deltatune bench --config CONFIG.json [--tokens 8192] [--steps 5] [--warmup 2]
//                 [--recompute layer|none] [--seed 0] [--layers N] [--lr 1e-5]
// The headline training-step benchmark (shared/docs/benchmark.md, "27B-slice"): the model is
// random-initialised on the GPU (Qwen35GpuModel::create_random, nothing staged on the host), the
// batches are 1D packed from documents of lognormal(7.0, 0.5) lengths clipped to [16, tokens]
// (greedy, like bench_peer.py's batches_1d; std::mt19937_64, so not the peer's exact lengths)
// with uniform random ids and every token trained. Each step is zero-grad, forward, backward
// and AdamW (fp32 masters, moments on the device). One JSON line on stdout.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "daemon/cli/commands.h"
#include "daemon/cli/flags.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/device/device_context.h"
#include "runtime/model/packed_batch.h"
#include "runtime/model/qwen35_config.h"
#include "runtime/model/qwen35_gpu_model.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#include <cupti.h>

#include "runtime/device/cuda_status.h"
#include "runtime/model/gpu_blocks.h"
#endif

namespace deltatune::cli {

namespace {

struct BenchOptions {
    std::string config;
    int64_t tokens = 8192, steps = 5, warmup = 2, layers = 0;
    std::string recompute = "layer";
    uint64_t seed = 0;
    AdamWHyper adamw{1e-5, 0.9, 0.95, 1e-8, 0.0};
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

// Model FLOPs per step (kernels_and_performance.md §9; recomputation not counted):
//   6 * N_mm * T                     N_mm = every linear weight incl. the LM head, not the
//   embedding
//   + per full-attention layer 12 * n_q * d_h * s_bar * T,   s_bar = sum s_i^2 / (2 sum s_i)
//   + per GDN layer HV * T * [(6KV + 5.25CK + 4CV) + (16KV + 18CK + 10CV + 4C^2)],  C = 64
double step_flops(const Qwen35Config& c, const std::vector<int64_t>& docs) {
    const double H = static_cast<double>(c.hidden_size),
                 I = static_cast<double>(c.intermediate_size);
    double T = 0, sq = 0;
    for (int64_t s : docs) T += static_cast<double>(s), sq += static_cast<double>(s) * s;
    const double s_bar = sq / (2 * T);
    const double D = static_cast<double>(c.head_dim),
                 nq = static_cast<double>(c.num_attention_heads);
    const double nkv = static_cast<double>(c.num_key_value_heads);
    const double K = static_cast<double>(c.linear_key_head_dim);
    const double V = static_cast<double>(c.linear_value_head_dim);
    const double HV = static_cast<double>(c.linear_num_value_heads), C = 64;
    double n_mm = static_cast<double>(c.vocab_size) * H, extra = 0;
    for (LayerType t : c.layer_types) {
        n_mm += 3 * I * H;
        if (t == LayerType::kLinearAttention) {
            n_mm += static_cast<double>(c.conv_dim()) * H +
                    2 * static_cast<double>(c.value_dim()) * H + 2 * HV * H;
            extra += HV * ((6 * K * V + 5.25 * C * K + 4 * C * V) +
                           (16 * K * V + 18 * C * K + 10 * C * V + 4 * C * C));
        } else {
            n_mm += (2 * nq * D + 2 * nkv * D) * H + nq * D * H;
            extra += 12 * nq * D * s_bar;
        }
    }
    return (6 * n_mm + extra) * T;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// CUPTI activity records of one profiled step: kernel count and the union of their intervals.
struct KernelTrace {
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    int64_t memops = 0;
};
KernelTrace* g_trace = nullptr;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = 8 << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (!g_trace) continue;
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
            rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
            g_trace->spans.emplace_back(k->start, k->end);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY ||
                   rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            ++g_trace->memops;
        }
    }
    std::free(buffer);
}

double busy_ms(std::vector<std::pair<uint64_t, uint64_t>> spans) {
    std::sort(spans.begin(), spans.end());
    uint64_t busy = 0, end = 0;
    for (auto [a, b] : spans) {
        if (a < end) a = end;
        if (b > a) busy += b - a;
        end = std::max(end, b);
    }
    return static_cast<double>(busy) * 1e-6;
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
    DT_ASSIGN_OR_RETURN(Recompute recompute, parse_recompute(o.recompute));
    const int64_t total_steps = o.warmup + o.steps + 1;  // + one profiled step
    std::mt19937_64 rng(o.seed);
    const auto lens = make_batches(total_steps, o.tokens, rng);
    std::vector<PackedBatch> batches;
    for (const auto& b : lens) {
        std::vector<Document> docs;
        for (int64_t len : b) {
            Document d;
            d.input_ids.resize(static_cast<size_t>(len));
            for (auto& id : d.input_ids) id = static_cast<int32_t>(rng() % c.vocab_size);
            d.labels = d.input_ids;
            docs.push_back(std::move(d));
        }
        DT_ASSIGN_OR_RETURN(PackedBatch p, pack_documents(docs, c.vocab_size));
        batches.push_back(std::move(p));
    }

    DT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceContext> ctx, DeviceContext::create(Device::cuda(0)));
    const auto t_init = std::chrono::steady_clock::now();
    DT_ASSIGN_OR_RETURN(std::unique_ptr<Qwen35GpuModel> net,
                        Qwen35GpuModel::create_random(*ctx, c, recompute, o.seed));
    const double init_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_init).count();
    const cudaStream_t s = ctx->compute_stream();
    cudaEvent_t ev[3];
    for (auto& e : ev) DT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));

    KernelTrace trace;
    std::vector<double> step_ms, tok_s, mfu, bwd_host_ms, bwd_gpu_ms;
    double last_loss = 0;
    for (int64_t i = 0; i < total_steps; ++i) {
        const bool profiled = i == total_steps - 1;
        if (profiled) {
            g_trace = &trace;
            if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) !=
                    CUPTI_SUCCESS ||
                cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
                g_trace = nullptr;
            }
            cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
            cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
        }
        const PackedBatch& b = batches[static_cast<size_t>(i)];
        DT_RETURN_IF_ERROR(ctx->synchronize());
        const auto t0 = std::chrono::steady_clock::now();
        DT_RETURN_IF_ERROR(net->zero_grads());
        DT_ASSIGN_OR_RETURN(LossResult loss, net->forward(b));  // waits for the loss
        const auto t1 = std::chrono::steady_clock::now();
        DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[0], s));
        DT_RETURN_IF_ERROR(net->backward());
        DT_RETURN_IF_ERROR(net->adamw_step(o.adamw, i + 1));
        const auto t2 = std::chrono::steady_clock::now();
        DT_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[1], s));
        DT_RETURN_IF_ERROR(ctx->synchronize());
        const auto t3 = std::chrono::steady_clock::now();
        last_loss = loss.loss;
        if (profiled) {
            cuptiActivityFlushAll(1);
            cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
            cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
            cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
            g_trace = nullptr;
            continue;
        }
        if (i < o.warmup) continue;
        const double ms = std::chrono::duration<double, std::milli>(t3 - t0).count();
        float gpu = 0;
        DT_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&gpu, ev[0], ev[1]));
        (void)t1;
        step_ms.push_back(ms);
        tok_s.push_back(static_cast<double>(b.tokens()) / (ms * 1e-3));
        mfu.push_back(step_flops(c, lens[static_cast<size_t>(i)]) / (ms * 1e-3) / 989.4e12);
        bwd_host_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
        bwd_gpu_ms.push_back(gpu);
    }
    size_t free_b = 0, total_b = 0;
    DT_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
    for (auto& e : ev) cudaEventDestroy(e);

    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    const double tokens_total = [&] {
        double t = 0;
        for (size_t i = static_cast<size_t>(o.warmup); i < static_cast<size_t>(o.warmup + o.steps);
             ++i)
            t += static_cast<double>(batches[i].tokens());
        return t / static_cast<double>(o.steps);
    }();
    nlohmann::json j = {
        {"workload", "27B-slice"},
        {"layers", c.num_layers},
        {"recompute", recompute_name(recompute)},
        {"tokens_per_batch_budget", o.tokens},
        {"mean_real_tokens_per_batch", tokens_total},
        {"steps", o.steps},
        {"warmup", o.warmup},
        {"tokens_per_s", median(tok_s)},
        {"step_ms", median(step_ms)},
        {"mfu", median(mfu)},
        {"optimizer", "adamw fp32 masters (lr 1e-5, betas 0.9/0.95, wd 0)"},
        {"loss_last", last_loss},
        {"peak_memory_gib", static_cast<double>(net->peak_device_bytes()) / kGiB},
        {"device_used_gib_cudaMemGetInfo", static_cast<double>(total_b - free_b) / kGiB},
        {"backward_adamw_host_enqueue_ms", median(bwd_host_ms)},
        {"backward_adamw_gpu_ms", median(bwd_gpu_ms)},
        {"gdn_impl", gpu_gdn_fused(c, ctx->sm_version())
                         ? "fused: kernels/causal_conv1d.cu, gated_delta_rule*.cu, gated_rmsnorm.cu"
                         : "kernels/gdn_simple.cu (not the fused causal_conv1d/gated_delta_rule "
                           "kernels)"},
        {"init_s", init_s},
    };
    if (!trace.spans.empty()) {
        j["kernel_launches_per_step"] = static_cast<int64_t>(trace.spans.size());
        j["kernel_launches_per_layer"] =
            static_cast<double>(trace.spans.size()) / static_cast<double>(c.num_layers);
        j["memcpy_memset_per_step"] = trace.memops;
        j["gpu_kernel_busy_ms_profiled_step"] = busy_ms(trace.spans);
    }
    return j;
#endif
}

absl::StatusOr<BenchOptions> parse_bench_options(const std::vector<std::string>& args) {
    DT_ASSIGN_OR_RETURN(Flags f, Flags::parse(args, {"config", "tokens", "steps", "warmup",
                                                     "recompute", "seed", "layers", "lr"}));
    BenchOptions o;
    DT_ASSIGN_OR_RETURN(o.config, f.require("config"));
    DT_ASSIGN_OR_RETURN(uint64_t tokens, f.get_uint("tokens", 8192));
    DT_ASSIGN_OR_RETURN(uint64_t steps, f.get_uint("steps", 5));
    DT_ASSIGN_OR_RETURN(uint64_t warmup, f.get_uint("warmup", 2));
    DT_ASSIGN_OR_RETURN(uint64_t layers, f.get_uint("layers", 0));
    DT_ASSIGN_OR_RETURN(o.seed, f.get_uint("seed", 0));
    DT_ASSIGN_OR_RETURN(o.adamw.lr, f.get_double("lr", 1e-5));
    o.recompute = f.get("recompute", "layer");
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
        std::fprintf(stderr, "deltatune bench: %s\n", std::string(j.status().message()).c_str());
        return 1;
    }
    std::printf("%s\n", j->dump().c_str());
    return 0;
}

}  // namespace deltatune::cli
