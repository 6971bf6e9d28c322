// [cuda] FSDP on the GPU (runtime/distributed/fsdp_gpu.h) against the single-device model: a small
// random Qwen3.5 (one fused-GDN and one full-attention layer, untied and tied embeddings) trained 3
// AdamW steps on packed batches of awkward document lengths.
//   - World size 1 over NCCL: the same losses and parameters as Qwen35GpuModel's own buffers.
//   - Gradient accumulation without reduce-scatters (sync off for all but the last micro-batch)
//     equals reducing every micro-batch.
//   - World size 2 (when 2 GPUs are present, one thread per rank): each rank takes one
//     micro-batch of the global batch; losses and parameters equal the single-device model
//     taking both micro-batches in one step.
//   - Checkpoint shards: saved after training and loaded into a fresh world-size-1 source, from
//     the file itself and from it cut into world-size-3 files, give back the same masters and
//     moments bit for bit; another model's shards are refused.
// Skips with a printed reason without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/device/device_context.h"
#include "runtime/distributed/fsdp_gpu.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/model/qwen35_params.h"
#include "runtime/optim/gpu_optimizer.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/gpu_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using testing::have_gpu;
using testing::param_rel_diff;
using testing::random_batch;

std::string config_json(bool tied) {
    return std::string(R"({
  "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
  "vocab_size": 512, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
  "layer_types": ["linear_attention", "full_attention"],
  "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 256,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 128,
  "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "hidden_act": "silu",
  "rms_norm_eps": 1e-06, "initializer_range": 0.02, "tie_word_embeddings": )") +
           (tied ? "true" : "false") + R"(,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                      "partial_rotary_factor": 0.25},
  "max_position_embeddings": 4096, "dtype": "bfloat16"})";
}

constexpr int kSteps = 3;
const AdamWHyper kHyper{1e-3, 0.9, 0.95, 1e-8, 0.1};

// Step s, micro-batch k of `micro` (one batch per rank in the world-2 test).
PackedBatch batch_for(int step, int k, int64_t vocab) {
    const std::vector<std::vector<int32_t>> lengths = {{1, 63, 65, 200}, {130, 7, 64}};
    return random_batch(lengths[static_cast<size_t>(k % 2)], vocab,
                        static_cast<uint32_t>(100 * step + k));
}

struct Run {
    std::vector<double> losses;  // global mean loss per step
    ParamSet params;
};

// The single-device model taking `micro` micro-batches per step.
Run run_flat(const Qwen35Config& c, const ParamSet& init, int micro) {
    auto ctx = DeviceContext::create(Device::cuda(0));
    REQUIRE(ctx.ok());
    ParamSet p = init.clone();
    auto net = Qwen35GpuModel::create(**ctx, c, p, Recompute::kLayer);
    REQUIRE(net.ok());
    auto store = (*net)->param_store();
    REQUIRE(store.ok());
    auto optimizer = GpuOptimizer::create(**ctx, **store, /*comm=*/nullptr);
    REQUIRE(optimizer.ok());
    Run run;
    for (int s = 1; s <= kSteps; ++s) {
        REQUIRE((*net)->zero_grads().ok());
        double labels = 0, loss_sum = 0;
        for (int k = 0; k < micro; ++k) labels += batch_for(s, k, c.vocab_size).label_tokens();
        for (int k = 0; k < micro; ++k) {
            auto l = (*net)->forward(batch_for(s, k, c.vocab_size), labels);
            REQUIRE(l.ok());
            loss_sum += l->loss_sum;
            REQUIRE((*net)->backward().ok());
        }
        run.losses.push_back(loss_sum / labels);
        REQUIRE((*optimizer)->step(kHyper, s, /*max_grad_norm=*/0.0).ok());
    }
    run.params = init.zeros_like();
    REQUIRE((*net)->download_params(run.params).ok());
    return run;
}

// One FSDP rank: micro-batches k = rank, rank + world, ... of `micro` per step. `sync_last_only`
// reduce-scatters only at the last micro-batch.
// `save_to`: this rank's checkpoint shard after the last step.
// `zero_except`: zero through zero_grads_except (the engine's world-size-1 path: the tracked
// embedding rows only) instead of zero_grads.
absl::StatusOr<Run> run_fsdp(const Qwen35Config& c, const ParamSet& init, int rank, int world,
                             const std::string& rendezvous, int micro, bool sync_last_only,
                             const std::string& save_to = "", bool zero_except = false) {
    DT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceContext> ctx,
                        DeviceContext::create(Device::cuda(rank)));
    NcclOptions o;
    o.rank = rank, o.world_size = world, o.device = rank, o.store_dir = rendezvous;
    o.prefix = "fsdp", o.timeout = std::chrono::milliseconds(60000);
    DT_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm, NcclCommunicator::create(o));
    DT_ASSIGN_OR_RETURN(std::unique_ptr<FsdpGpuParams> fsdp, FsdpGpuParams::create(*ctx, *comm, c));
    DT_RETURN_IF_ERROR(fsdp->load(init));
    DT_ASSIGN_OR_RETURN(
        std::unique_ptr<Qwen35GpuModel> net,
        Qwen35GpuModel::create_with_source(*ctx, c, fsdp->layout(), *fsdp, Recompute::kLayer));
    DT_ASSIGN_OR_RETURN(std::unique_ptr<GpuOptimizer> optimizer,
                        GpuOptimizer::create(*ctx, *fsdp, comm.get()));
    Run run;
    if (world == 1 && fsdp->tracks_embedding_rows() == c.tie_word_embeddings) {
        return absl::InternalError("the untied embedding's rows should be tracked, only then");
    }
    for (int s = 1; s <= kSteps; ++s) {
        if (zero_except) {
            DT_RETURN_IF_ERROR(fsdp->zero_grads_except(std::vector<char>(init.all().size(), 0)));
        } else {
            DT_RETURN_IF_ERROR(fsdp->zero_grads());
        }
        double labels = 0;
        for (int k = 0; k < micro; ++k) labels += batch_for(s, k, c.vocab_size).label_tokens();
        std::vector<double> loss_sum{0.0};
        for (int k = rank; k < micro; k += world) {
            fsdp->set_gradient_sync(!sync_last_only || k + world >= micro);
            DT_ASSIGN_OR_RETURN(LossResult l, net->forward(batch_for(s, k, c.vocab_size), labels));
            loss_sum[0] += l.loss_sum;
            DT_RETURN_IF_ERROR(net->backward());
        }
        DT_RETURN_IF_ERROR(fsdp->all_reduce_host(loss_sum));
        run.losses.push_back(loss_sum[0] / labels);
        DT_ASSIGN_OR_RETURN(double norm, optimizer->step(kHyper, s, /*max_grad_norm=*/0.0));
        if (!(norm > 0)) return absl::InternalError("gradient norm not positive");
    }
    run.params = init.zeros_like();
    DT_RETURN_IF_ERROR(fsdp->download(run.params));
    if (!save_to.empty()) DT_RETURN_IF_ERROR(fsdp->save_shard(save_to));
    net.reset();
    return run;
}

ParamSet initial_params(const Qwen35Config& c) {
    ParamSet p = make_qwen35_params(c, c.tie_word_embeddings);
    init_qwen35_params(c, p, 5);
    return p;
}

TEST_CASE("FSDP at world size 1 over NCCL equals the single-device GPU model", "[dist][cuda]") {
    if (!have_gpu()) return;
    for (bool tied : {false, true}) {
        INFO("tied embeddings: " << tied);
        auto c = parse_qwen35_config(config_json(tied), "test");
        REQUIRE(c.ok());
        const ParamSet init = initial_params(*c);
        testing::TempDir tmp;
        const Run ref = run_flat(*c, init, 2);
        auto got = run_fsdp(*c, init, 0, 1, tmp.file(tied ? "rdv_t" : "rdv"), 2, false);
        REQUIRE(got.ok());
        for (int s = 0; s < kSteps; ++s) {
            std::printf("  tied=%d step %d loss single %.9f fsdp %.9f\n", tied, s + 1,
                        ref.losses[static_cast<size_t>(s)], got->losses[static_cast<size_t>(s)]);
            CHECK(got->losses[static_cast<size_t>(s)] ==
                  Approx(ref.losses[static_cast<size_t>(s)]).epsilon(1e-6));
        }
        const double d = param_rel_diff(got->params, ref.params);
        std::printf("  tied=%d parameters after %d steps: rel diff %.3e\n", tied, kSteps, d);
        // The same kernels in the same order: equal bits, the untied embedding's deferred
        // updates (applied as the forward reads its rows and before the download) included.
        CHECK(d == 0.0);
        // Gradient accumulation without communication: same parameters.
        auto acc = run_fsdp(*c, init, 0, 1, tmp.file(tied ? "rdv_ta" : "rdv_a"), 2, true);
        REQUIRE(acc.ok());
        const double da = param_rel_diff(acc->params, ref.params);
        std::printf("  tied=%d unsynced accumulation: rel diff %.3e\n", tied, da);
        CHECK(da < 1e-5);
        // Zeroing only the embedding rows the last step marked: the same bits as a memset.
        auto rows = run_fsdp(*c, init, 0, 1, tmp.file(tied ? "rdv_tr" : "rdv_r"), 2, false, "",
                             /*zero_except=*/true);
        REQUIRE(rows.ok());
        CHECK(rows->losses == got->losses);
        CHECK(param_rel_diff(rows->params, got->params) == 0.0);
    }
}

// A world-size-1 shard file cut into the `world` files that many ranks would have saved: every
// unit's flat segment (true length from `group_sizes`) padded to world * 128 and split evenly.
std::vector<std::string> reshard_file(const std::string& path, const std::vector<int64_t>& groups,
                                      int world, const testing::TempDir& tmp) {
    auto f = SafetensorsFile::open(path);
    REQUIRE(f.ok());
    std::vector<std::vector<std::pair<std::string, Tensor>>> out(static_cast<size_t>(world));
    for (const std::string& name : f->names()) {
        auto t = f->get(name);
        REQUIRE(t.ok());
        const float* src = t->data<float>();
        if (name.ends_with(".replicated")) {
            for (auto& o : out)
                o.emplace_back(name, Tensor::cpu_from({t->numel()}, {src, size_t(t->numel())}));
            continue;
        }
        const int64_t numel = groups[std::stoul(name.substr(name.rfind('.') + 1))];
        const int64_t quantum = world * kGpuParamAlign;
        const int64_t shard = (numel + quantum - 1) / quantum * quantum / world;
        for (int r = 0; r < world; ++r) {
            Tensor piece = Tensor::cpu({shard});
            for (int64_t i = 0; i < shard && r * shard + i < numel; ++i) {
                piece.data<float>()[i] = src[r * shard + i];
            }
            out[static_cast<size_t>(r)].emplace_back(name, std::move(piece));
        }
    }
    std::vector<std::string> files;
    for (int r = 0; r < world; ++r) {
        files.push_back(tmp.file("shard-" + std::to_string(r) + "-of-" + std::to_string(world)));
        REQUIRE(write_safetensors(files.back(), out[static_cast<size_t>(r)]).ok());
    }
    return files;
}

TEST_CASE("FSDP GPU checkpoint shards reload exactly, also from another world size's files",
          "[dist][cuda]") {
    if (!have_gpu()) return;
    auto c = parse_qwen35_config(config_json(false), "test");
    REQUIRE(c.ok());
    const ParamSet init = initial_params(*c);
    testing::TempDir tmp;
    const std::string saved = tmp.file("trained.safetensors");
    auto trained = run_fsdp(*c, init, 0, 1, tmp.file("rdv_s"), 2, false, saved);
    REQUIRE(trained.ok());
    auto ctx = DeviceContext::create(Device::cuda(0));
    REQUIRE(ctx.ok());
    NcclOptions o;
    o.store_dir = tmp.file("rdv_l"), o.prefix = "load";
    auto comm = NcclCommunicator::create(o);
    REQUIRE(comm.ok());
    auto fresh = FsdpGpuParams::create(**ctx, **comm, *c);
    REQUIRE(fresh.ok());
    for (int world : {1, 3}) {
        INFO("saved at world size " << world);
        const auto files = world == 1 ? std::vector<std::string>{saved}
                                      : reshard_file(saved, (*fresh)->group_sizes(), world, tmp);
        REQUIRE((*fresh)->load_shards(files).ok());
        ParamSet loaded = init.zeros_like();
        REQUIRE((*fresh)->download(loaded).ok());
        CHECK(param_rel_diff(loaded, trained->params) == 0.0);
        // Masters and both moments: saving again gives the trained run's file, tensor for tensor.
        const std::string again = tmp.file("again" + std::to_string(world));
        REQUIRE((*fresh)->save_shard(again).ok());
        auto a = SafetensorsFile::open(saved);
        auto b = SafetensorsFile::open(again);
        REQUIRE(a.ok());
        REQUIRE(b.ok());
        REQUIRE(a->names() == b->names());
        for (const auto& name : a->names()) {
            INFO(name);
            const Tensor ta = *a->get(name), tb = *b->get(name);
            REQUIRE(ta.nbytes() == tb.nbytes());
            CHECK(std::memcmp(ta.raw_data(), tb.raw_data(), ta.nbytes()) == 0);
        }
    }
    // Another model's checkpoint is refused by name and shape, not loaded.
    auto tied = parse_qwen35_config(config_json(true), "test");
    REQUIRE(tied.ok());
    auto other = FsdpGpuParams::create(**ctx, **comm, *tied);
    REQUIRE(other.ok());
    const absl::Status refused = (*other)->load_shards({saved});
    INFO(refused.ToString());
    CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("FSDP at world size 2 equals one device taking the whole global batch", "[dist][cuda]") {
    if (!have_gpu()) return;
    int n = 0;
    cudaGetDeviceCount(&n);
    if (n < 2) {
        WARN("skipped: needs 2 GPUs, found " << n);
        return;
    }
    auto c = parse_qwen35_config(config_json(false), "test");
    REQUIRE(c.ok());
    const ParamSet init = initial_params(*c);
    const Run ref = run_flat(*c, init, 2);
    testing::TempDir tmp;
    std::vector<absl::StatusOr<Run>> runs(2, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
        threads.emplace_back(
            [&, r] { runs[r] = run_fsdp(*c, init, r, 2, tmp.file("rdv2"), 2, false); });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
        INFO("rank " << r << ": " << runs[r].status().ToString());
        REQUIRE(runs[r].ok());
        for (int s = 0; s < kSteps; ++s) {
            std::printf("  rank %d step %d loss single %.9f fsdp %.9f\n", r, s + 1,
                        ref.losses[static_cast<size_t>(s)],
                        runs[r]->losses[static_cast<size_t>(s)]);
            CHECK(runs[r]->losses[static_cast<size_t>(s)] ==
                  Approx(ref.losses[static_cast<size_t>(s)]).epsilon(1e-5));
        }
        const double d = param_rel_diff(runs[r]->params, ref.params);
        std::printf("  rank %d parameters after %d steps: rel diff %.3e\n", r, kSteps, d);
        CHECK(d < 1e-4);
    }
    CHECK(param_rel_diff(runs[0]->params, runs[1]->params) == 0.0);  // ranks agree exactly
}
#endif

}  // namespace
}  // namespace deltatune
