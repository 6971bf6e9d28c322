// End-to-end parity of `deltatune step` (CPU reference path) with transformers 5.17 in fp32,
// against fixtures made by scripts/make_parity_fixtures.py (each document run alone there):
// loss relative error < 1e-5, every gradient ||g - g_ref|| / ||g_ref|| < 1e-4, parameters after
// one AdamW step < 1e-6. Three tiny configs differing in head counts, GQA groups, value/key head
// ratio, head dims, layer pattern, tying, dtypes, layout and sharding.
#include <catch2/catch.hpp>

#include "nlohmann/json.hpp"
#include "runtime/checkpoint/file_util.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/runtime/test_util.h"

namespace deltatune {
namespace {

using testing::TempDir;

void compare_tensor_files(const std::string& mine_path, const std::string& ref_path, double tolerance) {
    auto mine = SafetensorsFile::open(mine_path);
    auto ref = SafetensorsFile::open(ref_path);
    REQUIRE(mine.ok());
    REQUIRE(ref.ok());
    REQUIRE(mine->names().size() == ref->names().size());
    double worst = 0;
    std::string worst_name;
    for (const auto& name : ref->names()) {
        INFO(name);
        REQUIRE(mine->contains(name));
        auto a = mine->get(name);
        auto b = ref->get(name);
        REQUIRE(a.ok());
        REQUIRE(b.ok());
        REQUIRE(a->shape() == b->shape());
        REQUIRE(a->dtype() == DType::kF32);
        const double err = testing::relative_error(*a, *b);
        if (err > worst) {
            worst = err;
            worst_name = name;
        }
        CHECK(err < tolerance);
    }
    WARN(ref_path << ": worst relative error " << worst << " (" << worst_name << ")");
}

void check_fixture(const std::string& name) {
    const std::string dir = testing::source_path("tests/fixtures/parity/" + name);
    auto expected_text = read_file(dir + "/expected.json");
    REQUIRE(expected_text.ok());
    const auto expected = nlohmann::json::parse(*expected_text);
    const auto& h = expected["adamw"];
    TempDir tmp;
    const std::string cmd = testing::cli_path() + " step --model " + dir + " --batch " + dir + "/batch.json" +
                            " --grads-out " + tmp.file("grads.safetensors") + " --update-out " +
                            tmp.file("update.safetensors") + " --lr " + h["lr"].dump() + " --beta1 " +
                            h["beta1"].dump() + " --beta2 " + h["beta2"].dump() + " --eps " + h["eps"].dump() +
                            " --weight-decay " + h["weight_decay"].dump();
    std::string out;
    REQUIRE(testing::run_command(cmd, out) == 0);
    const auto report = nlohmann::json::parse(out);
    const double loss = report["loss"].get<double>();
    const double ref_loss = expected["loss"].get<double>();
    INFO(name << ": loss " << loss << " vs transformers " << ref_loss);
    CHECK(std::abs(loss - ref_loss) / std::abs(ref_loss) < 1e-5);
    CHECK(report["label_tokens"] == expected["label_tokens"]);
    compare_tensor_files(tmp.file("grads.safetensors"), dir + "/grads.safetensors", 1e-4);
    compare_tensor_files(tmp.file("update.safetensors"), dir + "/update.safetensors", 1e-6);
}

TEST_CASE("step matches transformers: tiny-a (text layout, tied, GQA 2, v/k heads 2)", "[parity]") {
    check_fixture("tiny-a");
}

TEST_CASE("step matches transformers: tiny-b (multimodal sharded bf16, GQA 3, v/k heads 3)", "[parity]") {
    check_fixture("tiny-b");
}

TEST_CASE("step matches transformers: tiny-c (untied, no GQA, v/k heads 1)", "[parity]") {
    check_fixture("tiny-c");
}

}  // namespace
}  // namespace deltatune
