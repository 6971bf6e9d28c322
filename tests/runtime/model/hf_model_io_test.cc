// Hugging Face checkpoint loading and saving: both layouts load to identical models, sharded
// round trips, dtypes kept, and each broken checkpoint gives an error naming file and tensor.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/init_model.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
    return testing::source_path("tests/fixtures/parity/" + name);
}
std::string message(const absl::Status& s) {
    return std::string(s.message());
}

void require_same_params(const ParamSet& a, const ParamSet& b) {
    REQUIRE(a.all().size() == b.all().size());
    for (size_t i = 0; i < a.all().size(); ++i) {
        INFO(a.all()[i].name);
        REQUIRE(a.all()[i].name == b.all()[i].name);
        REQUIRE(a.all()[i].stored_dtype == b.all()[i].stored_dtype);
        REQUIRE(std::memcmp(a.all()[i].value.raw_data(), b.all()[i].value.raw_data(),
                            a.all()[i].value.nbytes()) == 0);
    }
}

// The text config wrapped as the multimodal qwen3_5 config.
std::string as_multimodal_config(const std::string& text_json) {
    auto text = nlohmann::json::parse(text_json);
    nlohmann::json mm = {{"model_type", "qwen3_5"},
                         {"text_config", text},
                         {"tie_word_embeddings", text.value("tie_word_embeddings", false)}};
    return mm.dump(2);
}

TEST_CASE("text and multimodal layouts load to identical models", "[checkpoint]") {
    auto text = load_hf_model(fixture("tiny-a"));
    REQUIRE(text.ok());
    CHECK(text->layout == CheckpointLayout::kText);
    CHECK(text->tied);
    TempDir tmp;
    HfModel mm = *text;
    mm.layout = CheckpointLayout::kMultimodal;
    mm.config_json = as_multimodal_config(text->config_json);
    REQUIRE(save_hf_model(tmp.str(), mm).ok());
    // A vision tower and MTP head in the file are not trained but carried to the export.
    Tensor extra = Tensor::cpu({2, 2});
    REQUIRE(write_safetensors(tmp.file("extra.safetensors"),
                              {{"model.visual.blocks.0.w", extra}, {"mtp.fc.weight", extra}})
                .ok());
    nlohmann::json index;
    auto written = SafetensorsFile::open(tmp.file("model.safetensors"));
    REQUIRE(written.ok());
    for (const auto& n : written->names()) index["weight_map"][n] = "model.safetensors";
    index["weight_map"]["model.visual.blocks.0.w"] = "extra.safetensors";
    index["weight_map"]["mtp.fc.weight"] = "extra.safetensors";
    REQUIRE(write_file_atomic(tmp.file("model.safetensors.index.json"), index.dump()).ok());

    auto loaded = load_hf_model(tmp.str());
    REQUIRE(loaded.ok());
    CHECK(loaded->layout == CheckpointLayout::kMultimodal);
    CHECK(SafetensorsFile::open(tmp.file("model.safetensors"))
              ->contains("model.language_model.layers.0.linear_attn.A_log"));
    require_same_params(text->params, loaded->params);
    REQUIRE(loaded->untouched.size() == 2);
    TempDir out;
    REQUIRE(save_hf_model(out.str(), *loaded).ok());
    auto exported = SafetensorsFile::open(out.file("model.safetensors"));
    REQUIRE(exported.ok());
    for (const char* name : {"model.visual.blocks.0.w", "mtp.fc.weight"}) {
        INFO(name);
        REQUIRE(exported->contains(name));
        const Tensor t = *exported->get(name);
        CHECK(t.shape() == extra.shape());
        CHECK(std::memcmp(t.raw_data(), extra.raw_data(), extra.nbytes()) == 0);
    }
}

TEST_CASE("sharded save and load round trip keeps stored dtypes", "[checkpoint]") {
    auto m = load_hf_model(fixture("tiny-b"));  // multimodal, sharded, BF16 with F32 A_log / norm
    REQUIRE(m.ok());
    CHECK(m->layout == CheckpointLayout::kMultimodal);
    CHECK_FALSE(m->tied);
    TempDir tmp;
    REQUIRE(save_hf_model(tmp.str(), *m, /*max_shard_bytes=*/64 * 1024).ok());
    CHECK(fs::exists(tmp.file("model.safetensors.index.json")));
    std::vector<std::string> shard_files;
    for (const auto& e : fs::directory_iterator(tmp.str())) {
        const std::string f = e.path().filename().string();
        if (f.starts_with("model-") && f.ends_with(".safetensors")) shard_files.push_back(f);
    }
    CHECK(shard_files.size() > 1);
    const std::string first = "model-00001-of-" +
                              std::string(5 - std::to_string(shard_files.size()).size(), '0') +
                              std::to_string(shard_files.size()) + ".safetensors";
    auto again = load_hf_model(tmp.str());
    REQUIRE(again.ok());
    require_same_params(m->params, again->params);
    auto shard = SafetensorsFile::open(tmp.file(first));
    REQUIRE(shard.ok());
    CHECK(shard->names().size() > 0);
    for (const auto& p : again->params.all()) {
        const bool keep_f32 =
            p.name.ends_with("A_log") || p.name.ends_with("linear_attn.norm.weight");
        CHECK(p.stored_dtype == (keep_f32 ? DType::kF32 : DType::kBF16));
    }
}

TEST_CASE("an opened checkpoint reads no weight until asked, then any slice exactly",
          "[checkpoint]") {
    auto whole = load_hf_model(fixture("tiny-b"));  // sharded, BF16 and F32 tensors
    auto opened = open_hf_model(fixture("tiny-b"));
    REQUIRE(whole.ok());
    REQUIRE(opened.ok());
    CHECK(whole->materialized);
    CHECK_FALSE(opened->materialized);
    REQUIRE(opened->weights);
    const CheckpointWeights& w = *opened->weights;
    REQUIRE(w.size() == whole->params.all().size());
    for (size_t i = 0; i < w.size(); ++i) {
        const NamedParam& p = whole->params.all()[i];
        INFO(p.name);
        CHECK(opened->params.all()[i].name == p.name);
        CHECK(opened->params.all()[i].stored_dtype == p.stored_dtype);
        CHECK(w.dtype(i) == p.stored_dtype);
        const int64_t n = p.value.numel();
        // An odd slice in the middle, as a rank's shard boundary falls.
        const int64_t a = n / 3, b = n - n / 5;
        std::vector<float> got(static_cast<size_t>(b - a));
        REQUIRE(w.copy_f32(i, a, b, got.data()).ok());
        CHECK(std::memcmp(got.data(), p.value.data<float>() + a, got.size() * sizeof(float)) == 0);
    }
    CHECK(absl::IsOutOfRange(w.copy_f32(0, 0, w.numel(0) + 1, nullptr)));
    REQUIRE(materialize_weights(*opened).ok());
    require_same_params(whole->params, opened->params);
}

// What save_hf_model wrote before it streamed: every tensor converted whole, grouped into shards
// in order, each shard written by write_safetensors.
void save_whole_model_reference(const std::string& dir, const HfModel& m, size_t max_shard_bytes) {
    std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
    size_t bytes = 0;
    auto place = [&](std::string name, Tensor t) {
        if (bytes > 0 && bytes + t.nbytes() > max_shard_bytes) shards.emplace_back(), bytes = 0;
        bytes += t.nbytes();
        shards.back().emplace_back(std::move(name), std::move(t));
    };
    for (const auto& p : m.params.all()) {
        auto stored = p.value.to_dtype(p.stored_dtype);
        REQUIRE(stored.ok());
        place(checkpoint_name(p.name, m.layout), *stored);
    }
    for (const auto& [name, t] : m.untouched) place(name, t);
    fs::create_directories(dir);
    for (size_t i = 0; i < shards.size(); ++i) {
        const std::string file =
            absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
        REQUIRE(write_safetensors(dir + "/" + file, shards[i], {{"format", "pt"}}).ok());
    }
}

TEST_CASE("the streamed writer writes the bytes the whole-model writer wrote", "[checkpoint]") {
    auto m = load_hf_model(fixture("tiny-b"));
    REQUIRE(m.ok());
    TempDir got, want;
    const size_t max_shard = 64 * 1024;
    REQUIRE(save_hf_model(got.str(), *m, max_shard).ok());
    save_whole_model_reference(want.str(), *m, max_shard);
    int shards = 0;
    for (const auto& e : fs::directory_iterator(want.str())) {
        const std::string name = e.path().filename().string();
        INFO(name);
        auto a = read_file(e.path().string());
        auto b = read_file(got.file(name));
        REQUIRE(a.ok());
        REQUIRE(b.ok());
        CHECK(*a == *b);
        ++shards;
    }
    CHECK(shards > 2);
    // A streamed source that gives a tensor the wrong number of bytes is refused, and no file
    // is left half written.
    TempDir bad;
    const ParamBytes short_values = [](size_t, const SafetensorsWrite& write) {
        const char byte = 0;
        return write(&byte, 1);
    };
    const absl::Status s = save_hf_model(bad.str(), *m, short_values);
    CHECK(absl::IsInternal(s));
    CHECK(message(s).find("was given 1 bytes") != std::string::npos);
    CHECK(fs::is_empty(bad.str()));  // no shard, no temporary file
}

TEST_CASE("init-model is deterministic in the seed and follows transformers' init",
          "[checkpoint]") {
    TempDir a, b, c;
    REQUIRE(init_model(testing::source_path("configs/models/tiny-b.json"), a.str(), 3).ok());
    REQUIRE(init_model(testing::source_path("configs/models/tiny-b.json"), b.str(), 3).ok());
    REQUIRE(init_model(testing::source_path("configs/models/tiny-b.json"), c.str(), 4).ok());
    auto ma = load_hf_model(a.str());
    auto mb = load_hf_model(b.str());
    auto mc = load_hf_model(c.str());
    REQUIRE(ma.ok());
    REQUIRE(mb.ok());
    REQUIRE(mc.ok());
    require_same_params(ma->params, mb->params);
    CHECK(testing::relative_error(ma->params.get("model.embed_tokens.weight"),
                                  mc->params.get("model.embed_tokens.weight")) > 0.5);
    const Tensor& a_log = ma->params.get("model.layers.1.linear_attn.A_log");
    for (int64_t i = 0; i < a_log.numel(); ++i) {
        CHECK(a_log.data<float>()[i] >= std::log(0.0099f));
        CHECK(a_log.data<float>()[i] <= std::log(16.001f));
    }
    CHECK(ma->params.get("model.norm.weight").data<float>()[0] == 0.0f);
    CHECK(ma->params.get("model.layers.1.linear_attn.norm.weight").data<float>()[0] == 1.0f);
    CHECK(ma->params.get("model.layers.1.linear_attn.dt_bias").data<float>()[0] == 1.0f);
}

TEST_CASE("broken checkpoints give clear errors", "[checkpoint]") {
    TempDir tmp;
    const std::string src = fixture("tiny-a");
    fs::copy_file(src + "/config.json", tmp.file("config.json"));
    auto model = SafetensorsFile::open(src + "/model.safetensors");
    REQUIRE(model.ok());
    auto rewrite = [&](const std::string& skip, const std::string& reshape) {
        std::vector<std::pair<std::string, Tensor>> ts;
        for (const auto& n : model->names()) {
            if (n == skip) continue;
            Tensor t = *model->get(n);
            if (n == reshape) t = Tensor::cpu({t.numel() / 2, 2});
            ts.emplace_back(n, t);
        }
        REQUIRE(write_safetensors(tmp.file("model.safetensors"), ts).ok());
    };

    SECTION("missing tensor") {
        rewrite("model.layers.2.linear_attn.dt_bias", "");
        auto s = load_hf_model(tmp.str()).status();
        CHECK(s.code() == absl::StatusCode::kNotFound);
        CHECK(message(s) ==
              tmp.str() +
                  ": missing tensor 'model.layers.2.linear_attn.dt_bias' (expected shape [4])");
    }
    SECTION("shape mismatch") {
        rewrite("", "model.layers.0.mlp.up_proj.weight");
        auto s = load_hf_model(tmp.str()).status();
        CHECK(s.code() == absl::StatusCode::kInvalidArgument);
        CHECK(message(s) == tmp.file("model.safetensors") +
                                ": tensor 'model.layers.0.mlp.up_proj.weight' has shape "
                                "[3072, 2], config.json implies [96, 64]");
    }
    SECTION("unsupported model type") {
        rewrite("", "");
        auto cfg = nlohmann::json::parse(*read_file(src + "/config.json"));
        cfg["model_type"] = "qwen3_next";
        REQUIRE(write_file_atomic(tmp.file("config.json"), cfg.dump()).ok());
        auto s = load_hf_model(tmp.str()).status();
        CHECK(s.code() == absl::StatusCode::kUnimplemented);
        CHECK(message(s) ==
              tmp.file("config.json") +
                  ": unsupported model_type 'qwen3_next' (supported: qwen3_5, qwen3_5_text)");
    }
    SECTION("config field errors name the field") {
        rewrite("", "");
        auto cfg = nlohmann::json::parse(*read_file(src + "/config.json"));
        cfg["num_key_value_heads"] = 3;
        REQUIRE(write_file_atomic(tmp.file("config.json"), cfg.dump()).ok());
        CHECK(message(load_hf_model(tmp.str()).status()) ==
              tmp.file("config.json") +
                  ": field 'num_key_value_heads': 3 does not divide num_attention_heads 4");
    }
    SECTION("tie flag that disagrees with the tensors") {
        rewrite("", "");
        auto cfg = nlohmann::json::parse(*read_file(src + "/config.json"));
        cfg["tie_word_embeddings"] = false;
        REQUIRE(write_file_atomic(tmp.file("config.json"), cfg.dump()).ok());
        CHECK(message(load_hf_model(tmp.str()).status()).find("has no lm_head.weight") !=
              std::string::npos);
    }
    SECTION("truncated weights file") {
        std::string bytes = *read_file(src + "/model.safetensors");
        bytes.resize(bytes.size() - 100);
        REQUIRE(write_file_atomic(tmp.file("model.safetensors"), bytes).ok());
        auto s = load_hf_model(tmp.str()).status();
        CHECK(s.code() == absl::StatusCode::kDataLoss);
        CHECK(message(s).find(
                  "model.safetensors: corrupt safetensors file: tensor 'model.norm.weight'") !=
              std::string::npos);
    }
    SECTION("index pointing at a missing shard") {
        rewrite("", "");
        nlohmann::json index;
        index["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
        REQUIRE(write_file_atomic(tmp.file("model.safetensors.index.json"), index.dump()).ok());
        auto s = load_hf_model(tmp.str()).status();
        CHECK(s.code() == absl::StatusCode::kNotFound);
        CHECK(message(s).find("model-00009-of-00009.safetensors: cannot open") !=
              std::string::npos);
    }
    SECTION("no weights at all") {
        auto s = load_hf_model(tmp.str()).status();
        CHECK(s.code() == absl::StatusCode::kNotFound);
    }
}

}  // namespace
}  // namespace deltatune
