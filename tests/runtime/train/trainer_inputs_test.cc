// What goes into an export besides the weights (runtime/train/trainer_inputs.h): the tokenizer
// side a server loads, copied as it is, and a generation_config.json when the base has none.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/data/chat_template_source.h"
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

std::string tokenizer_fixture(const std::string& name) {
    return testing::tree_dir("DELTATUNE_BINARY_DIR", DT_BINARY_DIR) + "/fixtures/tokenizer/" +
           name + "/tokenizer.json";
}

TEST_CASE("an export carries the chat template training used, and eos ends a turn", "[train]") {
    testing::TempDir tmp;
    const std::string model = tmp.file("model"), out = tmp.file("export");
    fs::create_directories(model);
    fs::create_directories(out);
    fs::copy_file(tokenizer_fixture("qwen3"), model + "/tokenizer.json");
    std::ofstream(out + "/config.json") << R"({"model_type": "qwen3_5", "eos_token_id": 151643})";
    TrainConfig c;
    c.model_dir = model;
    // No template in the base: the vocabulary's (Qwen3's here), as training chose, and
    // "<|im_end|>" (151645) first among the eos ids.
    REQUIRE(copy_tokenizer_files(c, out).ok());
    CHECK(*read_file(out + "/chat_template.jinja") ==
          builtin_chat_template_text(ChatTemplateKind::kQwen3));
    const auto generation = nlohmann::json::parse(*read_file(out + "/generation_config.json"));
    CHECK(generation["eos_token_id"] == nlohmann::json::array({151645, 151643}));

    // A base with its own template in tokenizer_config.json, trained with a named built-in one:
    // the export serves the named one, and the base's is gone from tokenizer_config.json.
    std::ofstream(model + "/tokenizer_config.json")
        << R"({"chat_template": "{{ messages }}", "eos_token": "<|im_end|>"})";
    c.chat_template = "qwen3_5";
    REQUIRE(copy_tokenizer_files(c, out).ok());
    CHECK(*read_file(out + "/chat_template.jinja") ==
          builtin_chat_template_text(ChatTemplateKind::kQwen35));
    const auto config = nlohmann::json::parse(*read_file(out + "/tokenizer_config.json"));
    CHECK_FALSE(config.contains("chat_template"));
    CHECK(config["eos_token"] == "<|im_end|>");
}

}  // namespace
}  // namespace deltatune
