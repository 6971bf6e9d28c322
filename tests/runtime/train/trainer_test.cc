// The training loop end to end on the CPU path: loss goes down, a stop-and-resume run equals the
// uninterrupted one bit for bit (weights, moments, data order), a corrupt newest checkpoint is
// reported and skipped, and the export loads as a Hugging Face checkpoint.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "runtime/base/file_util.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/lora.h"
#include "runtime/train/checkpoint_store.h"
#include "runtime/train/trainer.h"
#include "tests/common/test_util.h"
#include "tests/runtime/train/trainer_test_util.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using testing::config;

// Every tensor of `a` equals `b`'s bit for bit.
void check_bitwise_equal(const ParamSet& a, const ParamSet& b) {
    REQUIRE(a.all().size() == b.all().size());
    for (size_t i = 0; i < a.all().size(); ++i) {
        const auto& pa = a.all()[i].value;
        const auto& pb = b.all()[i].value;
        INFO(a.all()[i].name);
        CHECK(std::memcmp(pa.raw_data(), pb.raw_data(), pa.nbytes()) == 0);
    }
}

std::vector<std::string> event_types(std::vector<TrainerEvent>& log) {
    std::vector<std::string> out;
    for (const auto& e : log) out.push_back(e.type);
    return out;
}

TEST_CASE("training lowers the loss, checkpoints, evaluates and exports", "[train]") {
    testing::TempDir tmp;
    std::vector<TrainerEvent> log;
    TrainerHooks hooks;
    hooks.on_event = [&](const TrainerEvent& e) { log.push_back(e); };
    const TrainConfig c = config(tmp, "run");
    auto r = train(c, hooks);
    REQUIRE(r.ok());
    CHECK(r->completed);
    CHECK(r->step == 8);
    std::vector<double> losses;
    for (const auto& e : log) {
        if (e.type == "STEP_METRICS") losses.push_back(e.metrics.at("loss"));
    }
    REQUIRE(losses.size() == 8);
    CHECK(losses.back() < 0.8 * losses.front());
    const auto types = event_types(log);
    CHECK(std::count(types.begin(), types.end(), "CHECKPOINT_COMMITTED") == 4);
    CHECK(std::count(types.begin(), types.end(), "EXPORT_COMPLETED") == 1);
    // Setup reports where its time went, in order: the model opened (and, on the CPU, read),
    // the data loaded, the engine set up (on GPU ranks: the weights streamed to the shards).
    const auto at = [&](const char* t) { return std::find(types.begin(), types.end(), t); };
    CHECK(at("MODEL_LOADED") < at("DATA_LOADED"));
    CHECK(at("DATA_LOADED") < at("ENGINE_READY"));
    CHECK(at("ENGINE_READY") < at("TRAINING_STARTED"));
    for (const auto& e : log) {
        if (e.type == "MODEL_LOADED" || e.type == "DATA_LOADED" || e.type == "ENGINE_READY") {
            CHECK(e.metrics.at("seconds") >= 0);
        }
    }
    CHECK(r->last_eval_loss > 0);
    CHECK(list_checkpoints(c.output_dir + "/checkpoints")->size() == 3);  // keep_last_n
    auto exported = load_hf_model(r->export_dir);
    REQUIRE(exported.ok());
    CHECK(exported->layout == CheckpointLayout::kText);
}

TEST_CASE("weighted training files: DATA_LOADED shows the mixture, all-1 weights change nothing",
          "[train]") {
    testing::TempDir tmp;
    TrainConfig plain = config(tmp, "plain");
    plain.train_files.push_back(testing::write_data(tmp.file("more.jsonl"), 40, 3));
    plain.max_steps = 3;
    TrainConfig ones = plain, weighted = plain;
    ones.output_dir = tmp.file("ones");
    ones.train_weights = {1.0, 1.0};
    weighted.output_dir = tmp.file("weighted");
    weighted.train_weights = {0.5, 3.0};
    auto run = [](const TrainConfig& c, std::vector<TrainerEvent>* log) {
        TrainerHooks hooks;
        hooks.on_event = [log](const TrainerEvent& e) { log->push_back(e); };
        REQUIRE(train(c, hooks).ok());
    };
    auto find = [](const std::vector<TrainerEvent>& log, const std::string& type) {
        std::vector<TrainerEvent> out;
        for (const auto& e : log) {
            if (e.type == type) out.push_back(e);
        }
        return out;
    };
    std::vector<TrainerEvent> a, b, w;
    run(plain, &a), run(ones, &b), run(weighted, &w);
    const auto sa = find(a, "STEP_METRICS"), sb = find(b, "STEP_METRICS");
    REQUIRE(sa.size() == sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
        CHECK(sa[i].metrics.at("batch_digest") == sb[i].metrics.at("batch_digest"));
    }
    const TrainerEvent loaded = find(w, "DATA_LOADED").at(0);
    CHECK(loaded.metrics.at("documents_per_epoch") == 60 + 120);  // 120 x 0.5 + 40 x 3
    CHECK_THAT(loaded.details.at("mixture"), Catch::Contains("more.jsonl x3 (40 documents)"));
    CHECK(find(a, "DATA_LOADED").at(0).details.count("mixture") == 0);
    CHECK(find(w, "STEP_METRICS").at(0).metrics.at("batch_digest") !=
          sa.at(0).metrics.at("batch_digest"));
}

TEST_CASE("stop and resume equals the uninterrupted run bit for bit", "[train]") {
    testing::TempDir tmp;
    const TrainConfig straight = config(tmp, "straight");
    REQUIRE(train(straight, TrainerHooks{}).ok());

    TrainConfig interrupted = config(tmp, "interrupted");
    interrupted.checkpoint_every = 0;  // only the stop request checkpoints
    const TrainerHooks stop_at_3 = testing::stop_at_step(3);
    auto first = train(interrupted, stop_at_3);
    REQUIRE(first.ok());
    CHECK_FALSE(first->completed);
    CHECK(first->step == 3);
    std::vector<std::string> resumed_from;
    TrainerHooks watch;
    watch.on_event = [&](const TrainerEvent& e) {
        if (e.type == "RESUMED") resumed_from.push_back(e.details.at("path"));
    };
    auto second = train(interrupted, watch);
    REQUIRE(second.ok());
    CHECK(second->completed);
    REQUIRE(resumed_from.size() == 1);
    auto a = load_hf_model(straight.output_dir + "/export");
    auto b = load_hf_model(interrupted.output_dir + "/export");
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    check_bitwise_equal(a->params, b->params);
}

TEST_CASE("LoRA: the adapter trains on the frozen base, resumes exactly, exports for PEFT",
          "[train][lora]") {
    testing::TempDir tmp;
    auto lora = [&](const std::string& out) {
        TrainConfig c = config(tmp, out);
        c.lr.peak = 2e-2;
        LoraSpec spec;
        spec.rank = 4;
        spec.alpha = 8;
        spec.targets = {Proj::kQ, Proj::kV, Proj::kQkv, Proj::kOut, Proj::kDown};
        c.lora = spec;
        return c;
    };
    const TrainConfig straight = lora("lora");
    std::vector<double> losses;
    TrainerHooks hooks;
    hooks.on_event = [&](const TrainerEvent& e) {
        if (e.type == "STEP_METRICS") losses.push_back(e.metrics.at("loss"));
    };
    auto r = train(straight, hooks);
    REQUIRE(r.ok());
    REQUIRE(losses.size() == 8);
    CHECK(losses.back() < 0.9 * losses.front());
    // Checkpoints hold the adapter and its moments, not the model.
    auto ckpts = list_checkpoints(straight.output_dir + "/checkpoints");
    REQUIRE(ckpts.ok());
    const auto full =
        fs::file_size(testing::source_path("tests/fixtures/parity/tiny-c") + "/model.safetensors");
    CHECK(fs::file_size(ckpts->back().path + "/shard-0-of-1.safetensors") < full / 4);
    // The export is a PEFT folder that reads back, with the base untouched.
    auto base = load_hf_model(straight.model_dir);
    REQUIRE(base.ok());
    auto adapter = load_peft_adapter(r->export_dir, *base);
    REQUIRE(adapter.ok());
    CHECK(adapter->spec.targets.size() == 5);
    CHECK(adapter->params.all().size() == 2 * (2 + 4 + 3));  // q, v; qkv, out x2; down x3
    CHECK_FALSE(fs::exists(r->export_dir + "/model.safetensors"));

    // Stopped at step 3 and resumed: the same adapter bit for bit.
    TrainConfig interrupted = lora("lora-interrupted");
    interrupted.checkpoint_every = 0;
    const TrainerHooks stop_at_3 = testing::stop_at_step(3);
    REQUIRE(train(interrupted, stop_at_3).ok());
    auto second = train(interrupted, TrainerHooks{});
    REQUIRE(second.ok());
    auto resumed = load_peft_adapter(second->export_dir, *base);
    REQUIRE(resumed.ok());
    check_bitwise_equal(adapter->params, resumed->params);

    // export: merged, a whole checkpoint: adapted projections changed, everything else as it was.
    TrainConfig merged = lora("lora-merged");
    merged.max_steps = 2;
    merged.lora_merged_export = true;
    auto m = train(merged, TrainerHooks{});
    REQUIRE(m.ok());
    auto folded = load_hf_model(m->export_dir);
    REQUIRE(folded.ok());
    const std::string down = layer_prefix(0) + "mlp.down_proj.weight";
    const std::string up = layer_prefix(0) + "mlp.up_proj.weight";
    CHECK(testing::relative_error(folded->params.get(down), base->params.get(down)) > 0);
    CHECK(testing::relative_error(folded->params.get(up), base->params.get(up)) == 0);
}

TEST_CASE("a corrupt newest checkpoint is reported and the previous one is used", "[train]") {
    testing::TempDir tmp;
    TrainConfig c = config(tmp, "corrupt");
    c.max_steps = 4;
    REQUIRE(train(c, TrainerHooks{}).ok());
    auto ckpts = list_checkpoints(c.output_dir + "/checkpoints");
    REQUIRE(ckpts.ok());
    REQUIRE(ckpts->size() == 2);  // steps 2 and 4
    const std::string victim = ckpts->back().path + "/shard-0-of-1.safetensors";
    std::string bytes = *read_file(victim);
    bytes[bytes.size() / 2] ^= 0x10;
    REQUIRE(write_file_atomic(victim, bytes).ok());
    c.max_steps = 5;
    std::vector<TrainerEvent> log;
    TrainerHooks hooks;
    hooks.on_event = [&](const TrainerEvent& e) { log.push_back(e); };
    auto r = train(c, hooks);
    REQUIRE(r.ok());
    bool corrupt = false, resumed_at_2 = false;
    for (const auto& e : log) {
        corrupt |= e.type == "CHECKPOINT_CORRUPT" &&
                   e.message.find("SHA-256 mismatch") != std::string::npos;
        resumed_at_2 |= e.type == "RESUMED" && e.metrics.at("step") == 2;
    }
    CHECK(corrupt);
    CHECK(resumed_at_2);
}

}  // namespace
}  // namespace deltatune
