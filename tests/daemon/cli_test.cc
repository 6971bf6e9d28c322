// The deltatune CLI contract (architecture.md "Command-line contracts"): init-model and step
// end to end through the real binary, one JSON line on success, one clear error line and a
// non-zero exit on bad input.
#include <catch2/catch.hpp>

#include <filesystem>

#include "nlohmann/json.hpp"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

using testing::TempDir;

int run(const std::string& args, std::string& out) {
    return testing::run_command(testing::cli_path() + " " + args + " 2>&1", out);
}

TEST_CASE("init-model then step prints loss and label_tokens and writes grads", "[cli]") {
    TempDir tmp;
    std::string out;
    REQUIRE(run("init-model --config " + testing::source_path("configs/models/tiny-c.json") +
                    " --out " + tmp.file("m") + " --seed 9",
                out) == 0);
    CHECK(std::filesystem::exists(tmp.file("m/config.json")));
    CHECK(std::filesystem::exists(tmp.file("m/model.safetensors")));
    const std::string batch = tmp.file("batch.json");
    REQUIRE(
        testing::run_command(
            "echo '{\"documents\": [{\"input_ids\": [1, 2, 3, 4], \"labels\": [-100, 2, 3, 4]}, "
            "{\"input_ids\": [7]}, {\"input_ids\": [5, 6], \"labels\": [5, 6]}]}' > " +
                batch,
            out) == 0);
    REQUIRE(run("step --model " + tmp.file("m") + " --batch " + batch + " --grads-out " +
                    tmp.file("g.safetensors"),
                out) == 0);
    const auto j = nlohmann::json::parse(out);
    CHECK(j["label_tokens"] == 4);  // 3 in the first document, 1 in the third
    CHECK(j["documents"] == 3);
    CHECK(j["tokens"] == 7);
    CHECK(std::abs(j["loss"].get<double>() - std::log(300.0)) < 0.5);  // near-uniform at init
    CHECK(std::filesystem::exists(tmp.file("g.safetensors")));
}

TEST_CASE("bad command lines fail with one clear line", "[cli]") {
    const std::string fixture = testing::source_path("tests/fixtures/parity/tiny-a");
    std::string out;
    CHECK(run("step --batch x.json", out) == 1);
    CHECK(out == "deltatune step: missing required flag --model\n");
    CHECK(run("step --model " + fixture + " --batch " + fixture + "/batch.json --lr fast", out) ==
          1);
    CHECK(out == "deltatune step: flag --lr: 'fast' is not a number\n");
    CHECK(run("step --model " + fixture + " --batch " + fixture + "/batch.json --device tpu",
              out) == 1);
    CHECK(out == "deltatune step: --device: expected cpu or cuda, got 'tpu'\n");
    CHECK(run("step --model " + fixture + " --batch /nonexistent.json", out) == 1);
    CHECK(out.find("/nonexistent.json: cannot open") != std::string::npos);
    CHECK(run("step --model /nonexistent --batch x.json", out) == 1);
    CHECK(out.find("/nonexistent/config.json: cannot open") != std::string::npos);
    CHECK(run("init-model --config x.json --out y --colour blue", out) == 1);
    CHECK(out == "deltatune init-model: unknown flag --colour\n");
    CHECK(run("frobnicate", out) == 2);
}

}  // namespace
}  // namespace deltatune
