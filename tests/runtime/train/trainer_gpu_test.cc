// The training loop on the GPU engine (FSDP over NCCL at world size 1, one H200): the same job as
// the CPU reference path gives the same losses within bf16 tolerance, a batch of a rank with
// nothing to train joins the step without changing it, and a stop-and-resume run through the
// sharded GPU checkpoint equals the uninterrupted run. Skipped with a printed reason without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "runtime/model/hf_model_io.h"
#include "runtime/model/lora.h"
#include "runtime/train/checkpoint_store.h"
#include "runtime/train/trainer.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/gpu_test_util.h"
#include "tests/runtime/train/trainer_test_util.h"

namespace deltatune {
namespace {

TrainConfig gpu_config(const testing::TempDir& tmp, const std::string& out) {
    TrainConfig c = testing::config(tmp, out);
    c.model_dir = testing::source_path("tests/fixtures/parity/tiny-a");
    c.gpu.enabled = true;
    c.gpu.store_dir = tmp.file(out + "-rendezvous");
    c.gpu.watchdog = false;  // in-process: a hang fails the test by its own timeout instead
    c.gpu.timeout = std::chrono::milliseconds(60000);
    return c;
}

struct Run {
    std::vector<double> losses, norms;
    std::vector<std::string> engines;
    absl::StatusOr<TrainResult> result = absl::UnknownError("not run");
};

Run run(const TrainConfig& c, TrainerHooks hooks = {}) {
    Run r;
    hooks.on_event = [&](const TrainerEvent& e) {
        if (e.type == "STEP_METRICS") {
            r.losses.push_back(e.metrics.at("loss"));
            r.norms.push_back(e.metrics.at("grad_norm"));
        }
        if (e.type == "TRAINING_STARTED") r.engines.push_back(e.details.at("engine"));
    };
    r.result = train(c, hooks);
    return r;
}

// Relative L2 difference of the parameters exported to `dir` from those of `ref_dir`.
double export_rel_diff(const std::string& ref_dir, const std::string& dir) {
    auto ref = load_hf_model(ref_dir);
    auto got = load_hf_model(dir);
    REQUIRE(ref.ok());
    REQUIRE(got.ok());
    return testing::param_rel_diff(got->params, ref->params);
}

TEST_CASE("GPU training matches the CPU reference path", "[cuda][train]") {
    if (!testing::have_gpu()) return;
    testing::TempDir tmp;
    TrainConfig cpu = gpu_config(tmp, "cpu");
    cpu.gpu.enabled = false;
    const Run ref = run(cpu);
    REQUIRE(ref.result.ok());
    const TrainConfig gc = gpu_config(tmp, "gpu");
    const Run got = run(gc);
    REQUIRE(got.result.ok());
    CHECK(got.result->completed);
    REQUIRE(got.engines == std::vector<std::string>{"cuda-fsdp"});
    REQUIRE(got.losses.size() == ref.losses.size());
    double worst = 0;
    for (size_t i = 0; i < ref.losses.size(); ++i) {
        worst = std::max(worst, std::abs(got.losses[i] - ref.losses[i]) / ref.losses[i]);
    }
    const double params = export_rel_diff(cpu.output_dir + "/export", gc.output_dir + "/export");
    WARN("GPU vs CPU over " << ref.losses.size() << " steps: max loss rel err " << worst
                            << ", exported parameters rel L2 diff " << params << ", eval loss "
                            << got.result->last_eval_loss << " vs " << ref.result->last_eval_loss);
    // The first step sees the same parameters: only bf16 rounding separates the losses. Later
    // steps drift further, as Adam at lr 3e-3 turns rounding in near-zero gradients into whole
    // +-lr updates (parameters about 0.02 in size): a few percent after 8 steps.
    CHECK(std::abs(got.losses[0] - ref.losses[0]) < 5e-3 * ref.losses[0]);
    CHECK(worst < 3e-2);
    CHECK(params < 6e-2);
    CHECK(got.losses.back() < 0.8 * got.losses.front());
    CHECK(std::abs(got.result->last_eval_loss - ref.result->last_eval_loss) <
          2e-2 * ref.result->last_eval_loss);
}

TEST_CASE("a GPU rank's empty share of a step joins it without changing it", "[cuda][train]") {
    if (!testing::have_gpu()) return;
    testing::TempDir tmp;
    auto model = load_hf_model(testing::source_path("tests/fixtures/parity/tiny-a"));
    REQUIRE(model.ok());
    const auto docs = testing::random_docs({40, 17, 70}, model->config.vocab_size, 3);
    auto batch = pack_documents(docs, model->config.vocab_size);
    REQUIRE(batch.ok());
    const PackedBatch empty{{}, {}, {}, {0}};
    auto no_labels = *batch;
    for (auto& t : no_labels.targets) t = -100;
    AdamWHyper hyper{1e-3, 0.9, 0.95, 1e-8, 0.0};
    std::vector<ParamSet> after;
    for (int variant = 0; variant < 2; ++variant) {
        GpuRankOptions o;
        o.enabled = true, o.watchdog = false;
        o.store_dir = tmp.file("rendezvous"), o.prefix = "v" + std::to_string(variant);
        auto engine = make_gpu_train_engine(*model, o);
        REQUIRE(engine.ok());
        REQUIRE((*engine)->begin_step().ok());
        if (variant == 1) {  // two micro-batches that train nothing, then the real one
            auto e = (*engine)->forward_backward(empty, batch->label_tokens(), false);
            REQUIRE(e.ok());
            CHECK(*e == 0.0);
            auto n = (*engine)->forward_backward(no_labels, batch->label_tokens(), false);
            REQUIRE(n.ok());
            CHECK(*n == 0.0);
        }
        auto loss = (*engine)->forward_backward(*batch, batch->label_tokens(), true);
        REQUIRE(loss.ok());
        REQUIRE((*engine)->apply(hyper, 1.0).ok());
        ParamSet p = model->params.zeros_like();
        REQUIRE((*engine)->download(p).ok());
        after.push_back(std::move(p));
    }
    // Equal up to the order of atomic gradient additions (the embedding backward).
    for (size_t i = 0; i < after[0].all().size(); ++i) {
        const Tensor& a = after[0].all()[i].value;
        const Tensor& b = after[1].all()[i].value;
        double diff = 0, norm = 0;
        for (int64_t j = 0; j < a.numel(); ++j) {
            const double x = a.data<float>()[j], y = b.data<float>()[j];
            diff += (x - y) * (x - y), norm += x * x;
        }
        INFO(after[0].all()[i].name);
        CHECK(std::sqrt(diff) <= 1e-6 * std::sqrt(norm) + 1e-12);
    }
}

TEST_CASE("GPU stop and resume through the sharded checkpoint equals the straight run",
          "[cuda][train]") {
    if (!testing::have_gpu()) return;
    testing::TempDir tmp;
    const TrainConfig straight = gpu_config(tmp, "straight");
    const Run a = run(straight);
    REQUIRE(a.result.ok());

    TrainConfig interrupted = gpu_config(tmp, "interrupted");
    interrupted.checkpoint_every = 0;  // only the stop request checkpoints
    const TrainerHooks stop_at_3 = testing::stop_at_step(3);
    const Run first = run(interrupted, stop_at_3);
    REQUIRE(first.result.ok());
    CHECK(first.result->step == 3);
    auto ckpts = list_checkpoints(interrupted.output_dir + "/checkpoints");
    REQUIRE(ckpts.ok());
    REQUIRE(ckpts->size() == 1);
    CHECK(std::filesystem::exists(ckpts->back().path + "/shard-0-of-1.safetensors"));
    const Run second = run(interrupted);
    REQUIRE(second.result.ok());
    CHECK(second.result->completed);
    REQUIRE(first.losses.size() + second.losses.size() == a.losses.size());
    double worst = 0;
    for (size_t i = 0; i < a.losses.size(); ++i) {
        const double b = i < 3 ? first.losses[i] : second.losses[i - 3];
        worst = std::max(worst, std::abs(b - a.losses[i]) / a.losses[i]);
    }
    const double params =
        export_rel_diff(straight.output_dir + "/export", interrupted.output_dir + "/export");
    WARN("GPU resume at step 3 vs straight: max loss rel err "
         << worst << ", parameters rel L2 diff " << params);
    CHECK(worst < 1e-5);
    CHECK(params < 1e-5);
}

// The adapter of a PEFT export, as the flat list of its values.
std::vector<float> exported_adapter(const std::string& dir, const HfModel& base) {
    auto a = load_peft_adapter(dir, base);
    REQUIRE(a.ok());
    std::vector<float> out;
    for (const auto& p : a->params.all()) {
        out.insert(out.end(), p.value.data<float>(), p.value.data<float>() + p.value.numel());
    }
    return out;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
    REQUIRE(got.size() == ref.size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        diff += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
        norm += double(ref[i]) * ref[i];
    }
    return std::sqrt(diff / norm);
}

TEST_CASE("a LoRA job on the GPU matches the CPU job, resumes exactly, keeps small checkpoints",
          "[cuda][train][lora]") {
    if (!testing::have_gpu()) return;
    testing::TempDir tmp;
    auto lora = [&](const std::string& out) {
        TrainConfig c = gpu_config(tmp, out);
        c.lr.peak = 2e-2;
        LoraSpec spec;
        spec.rank = 4;
        spec.alpha = 8;
        spec.targets = {Proj::kQ, Proj::kV,   Proj::kO,    Proj::kQkv,
                        Proj::kZ, Proj::kOut, Proj::kGate, Proj::kDown};
        c.lora = spec;
        return c;
    };
    TrainConfig cpu = lora("lora-cpu");
    cpu.gpu.enabled = false;
    const Run ref = run(cpu);
    REQUIRE(ref.result.ok());
    const TrainConfig straight = lora("lora-gpu");
    const Run got = run(straight);
    REQUIRE(got.result.ok());
    REQUIRE(got.engines == std::vector<std::string>{"cuda-fsdp"});
    REQUIRE(got.losses.size() == ref.losses.size());
    double worst = 0;
    for (size_t i = 0; i < ref.losses.size(); ++i) {
        worst = std::max(worst, std::abs(got.losses[i] - ref.losses[i]) / ref.losses[i]);
    }
    auto base = load_hf_model(straight.model_dir);
    REQUIRE(base.ok());
    const std::vector<float> gpu_adapter = exported_adapter(got.result->export_dir, *base);
    const double adapter_diff =
        rel_l2(gpu_adapter, exported_adapter(ref.result->export_dir, *base));
    WARN("GPU LoRA vs CPU LoRA over "
         << ref.losses.size() << " steps: losses " << got.losses.front() << " -> "
         << got.losses.back() << ", max loss rel err " << worst << ", exported adapter rel L2 diff "
         << adapter_diff);
    CHECK(std::abs(got.losses[0] - ref.losses[0]) < 5e-3 * ref.losses[0]);
    CHECK(worst < 3e-2);
    // B starts at zero, so it is all updates, and Adam's first ones are close to +-lr per
    // element: elements whose gradient is at bf16 rounding level may go either way. The losses
    // above are the contract; the adapters only have to agree broadly.
    CHECK(adapter_diff < 0.3);
    CHECK(got.losses.back() < 0.9 * got.losses.front());
    // Checkpoints hold the adapter and its moments, not the base.
    auto ckpts = list_checkpoints(straight.output_dir + "/checkpoints");
    REQUIRE(ckpts.ok());
    REQUIRE_FALSE(ckpts->empty());
    const auto full = std::filesystem::file_size(straight.model_dir + "/model.safetensors");
    CHECK(std::filesystem::file_size(ckpts->back().path + "/shard-0-of-1.safetensors") < full / 4);

    // Stopped at step 3 and resumed from the adapter checkpoint: the straight run's adapter.
    TrainConfig interrupted = lora("lora-gpu-interrupted");
    interrupted.checkpoint_every = 0;
    const TrainerHooks stop_at_3 = testing::stop_at_step(3);
    REQUIRE(run(interrupted, stop_at_3).result.ok());
    const Run second = run(interrupted);
    REQUIRE(second.result.ok());
    const double resumed = rel_l2(exported_adapter(second.result->export_dir, *base), gpu_adapter);
    WARN("GPU LoRA resumed at step 3 vs straight: adapter rel L2 diff " << resumed);
    CHECK(resumed < 1e-6);
}

}  // namespace
}  // namespace deltatune
