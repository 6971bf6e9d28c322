// What goes into an export besides the weights (runtime/train/trainer_inputs.h): the tokenizer
// side a server loads, copied as it is, and a generation_config.json when the base has none.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/train/trainer_inputs.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

TEST_CASE("exports carry the tokenizer files and a generation config", "[train]") {
    testing::TempDir tmp;
    const std::string model = tmp.file("model"), out = tmp.file("export");
    fs::create_directories(model);
    fs::create_directories(out);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                          "special_tokens_map.json"}) {
        std::ofstream(model + "/" + f) << "content of " << f;
    }
    std::ofstream(out + "/config.json")
        << R"({"model_type": "qwen3_5", "text_config": {"eos_token_id": 248044, "vocab_size": 9}})";
    TrainConfig c;
    c.model_dir = model;
    REQUIRE(copy_tokenizer_files(c, out).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                          "special_tokens_map.json"}) {
        CHECK(*read_file(out + "/" + f) == std::string("content of ") + f);
    }
    CHECK_FALSE(fs::exists(out + "/merges.txt"));  // only what the base has
    const auto generation = nlohmann::json::parse(*read_file(out + "/generation_config.json"));
    CHECK(generation == nlohmann::json{{"_from_model_config", true}, {"eos_token_id", 248044}});

    // The base's own generation config wins.
    std::ofstream(model + "/generation_config.json") << R"({"temperature": 0.6})";
    REQUIRE(copy_tokenizer_files(c, out).ok());
    CHECK(*read_file(out + "/generation_config.json") == R"({"temperature": 0.6})");
}

}  // namespace
}  // namespace deltatune
