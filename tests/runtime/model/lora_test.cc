// LoRA adapters (runtime/model/lora.h): targets by Hugging Face module name, the pairs a model
// gets, PEFT's initialisation and scale, and a PEFT folder's refusals. The numbers against
// transformers + peft are in parity_test ("LoRA step matches...").
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/model/lora.h"
#include "runtime/model/qwen35_cpu_model.h"
#include "runtime/model/qwen35_params.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/gpu_test_util.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

TEST_CASE("LoRA targets are the projections' Hugging Face names", "[lora]") {
    auto t = parse_lora_targets({"q_proj", "in_proj_qkv", "down_proj", "q_proj"});
    REQUIRE(t.ok());
    CHECK(*t == std::vector<Proj>{Proj::kQ, Proj::kQkv, Proj::kDown});
    const absl::Status bad = parse_lora_targets({"qkv_proj"}).status();
    CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(bad.message()),
               Catch::Contains("unknown LoRA target module 'qkv_proj' (valid: q_proj, k_proj, "
                               "v_proj, o_proj, gate_proj, up_proj, down_proj, in_proj_qkv, "
                               "in_proj_z, in_proj_b, in_proj_a, out_proj)"));
    CHECK_FALSE(parse_lora_targets({}).ok());
}

TEST_CASE("a model gets one pair per targeted projection it has, initialised as PEFT does",
          "[lora]") {
    auto hf = load_hf_model(testing::source_path("tests/fixtures/parity/tiny-c"));
    REQUIRE(hf.ok());
    const Qwen35Config& c = hf->config;
    LoraSpec spec;
    spec.rank = 4;
    spec.alpha = 8;
    spec.targets = {Proj::kQ, Proj::kQkv, Proj::kDown};
    ParamSet a = make_lora_params(c, hf->params, spec);
    int64_t attention = 0, gdn = 0;
    for (LayerType t : c.layer_types) (t == LayerType::kFullAttention ? attention : gdn) += 1;
    // q_proj on attention layers, in_proj_qkv on Gated DeltaNet ones, down_proj on all; A and B.
    CHECK(a.all().size() == static_cast<size_t>(2 * (attention + gdn + c.num_layers)));
    const std::string down = layer_prefix(0) + "mlp.down_proj.";
    CHECK(a.get(down + "lora_A.weight").shape() == std::vector<int64_t>{4, c.intermediate_size});
    CHECK(a.get(down + "lora_B.weight").shape() == std::vector<int64_t>{c.hidden_size, 4});
    init_lora_params(a, 3);
    const Tensor& A = a.get(down + "lora_A.weight");
    const double bound = 1.0 / std::sqrt(static_cast<double>(c.intermediate_size));
    double max_abs = 0;
    for (int64_t i = 0; i < A.numel(); ++i)
        max_abs = std::max<double>(max_abs, std::abs(A.data<float>()[i]));
    CHECK(max_abs <= bound);
    CHECK(max_abs > 0.8 * bound);
    const Tensor& B = a.get(down + "lora_B.weight");
    for (int64_t i = 0; i < B.numel(); ++i) REQUIRE(B.data<float>()[i] == 0.0f);
    CHECK(spec.scale() == 2.0f);
    spec.use_rslora = true;
    CHECK(spec.scale() == 4.0f);  // alpha / sqrt(rank)
    CHECK(peft_name(down + "lora_A.weight", CheckpointLayout::kText) ==
          "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight");
}

TEST_CASE("a merged adapter computes what base + adapter computes", "[lora]") {
    auto hf = load_hf_model(testing::source_path("tests/fixtures/parity/tiny-c"));
    REQUIRE(hf.ok());
    auto adapter =
        load_peft_adapter(testing::source_path("tests/fixtures/parity/lora/tiny-c"), *hf);
    REQUIRE(adapter.ok());
    const PackedBatch batch = testing::random_batch({9, 30, 4}, hf->config.vocab_size, 5);
    ParamSet grads = adapter->params.zeros_like();
    Qwen35CpuModel with_adapter(hf->config, hf->params);
    with_adapter.attach_adapter(adapter->params, grads, adapter->spec.scale());
    auto want = with_adapter.forward(batch);
    REQUIRE(want.ok());
    ParamSet merged = hf->params.clone();
    merge_lora(hf->config, merged, adapter->params, adapter->spec.scale());
    Qwen35CpuModel folded(hf->config, merged);
    auto got = folded.forward(batch);
    REQUIRE(got.ok());
    CHECK(got->loss == Approx(want->loss).epsilon(1e-6));
    // Only adapted projections changed.
    CHECK(testing::relative_error(merged.get("model.norm.weight"),
                                  hf->params.get("model.norm.weight")) == 0);
    CHECK(testing::relative_error(merged.get(layer_prefix(0) + "mlp.up_proj.weight"),
                                  hf->params.get(layer_prefix(0) + "mlp.up_proj.weight")) > 0);
}

// A copy of the tiny-c LoRA fixture whose adapter_config.json `edit` changes.
std::string adapter_copy(const testing::TempDir& tmp, const std::string& name,
                         const std::function<void(nlohmann::json&)>& edit) {
    const std::string src = testing::source_path("tests/fixtures/parity/lora/tiny-c");
    const std::string dst = tmp.file(name);
    fs::create_directories(dst);
    fs::copy_file(src + "/adapter_model.safetensors", dst + "/adapter_model.safetensors");
    auto text = read_file(src + "/adapter_config.json");
    REQUIRE(text.ok());
    nlohmann::json j = nlohmann::json::parse(*text);
    edit(j);
    std::ofstream(dst + "/adapter_config.json") << j.dump();
    return dst;
}

TEST_CASE("a PEFT folder loads, or is refused with the reason", "[lora]") {
    testing::TempDir tmp;
    auto hf = load_hf_model(testing::source_path("tests/fixtures/parity/tiny-c"));
    REQUIRE(hf.ok());
    auto ok = load_peft_adapter(adapter_copy(tmp, "same", [](nlohmann::json&) {}), *hf);
    REQUIRE(ok.ok());
    CHECK(ok->spec.rank == 2);
    CHECK(ok->spec.scale() == 2.5f);
    CHECK(ok->params.all().size() == 46);
    const std::pair<std::function<void(nlohmann::json&)>, const char*> bad[] = {
        {[](nlohmann::json& j) { j["bias"] = "all"; }, "bias \"all\" (only \"none\")"},
        {[](nlohmann::json& j) { j["peft_type"] = "IA3"; }, "peft_type IA3 (only LORA)"},
        {[](nlohmann::json& j) { j["modules_to_save"] = {"lm_head"}; }, "modules_to_save"},
        {[](nlohmann::json& j) {
             j["target_modules"] = {"q_proj", "fc1"};
         },
         "unknown LoRA target module 'fc1'"},
        {[](nlohmann::json& j) { j["r"] = 3; }, "has shape [2, "},
        {[](nlohmann::json& j) { j["target_modules"] = {"q_proj"}; },
         "has tensors this model and adapter_config.json do not place"},
    };
    int i = 0;
    for (const auto& [edit, want] : bad) {
        INFO(want);
        const absl::Status s =
            load_peft_adapter(adapter_copy(tmp, "bad" + std::to_string(i++), edit), *hf).status();
        CHECK(s.code() == absl::StatusCode::kInvalidArgument);
        CHECK_THAT(std::string(s.message()), Catch::Contains(want));
    }
}

}  // namespace
}  // namespace deltatune
