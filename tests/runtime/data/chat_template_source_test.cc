// Which chat template a job renders with and its export serves
// (runtime/data/chat_template_source.h): the base's own when it is a built-in one, the named one,
// or the vocabulary's; never a silent mismatch.
#include "runtime/data/chat_template_source.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

std::string builtin(ChatTemplateKind kind) {
    return std::string(builtin_chat_template_text(kind));
}

TEST_CASE("the built-in templates are Hugging Face's, recognised through formatting noise",
          "[data][chat]") {
    CHECK_THAT(builtin(ChatTemplateKind::kQwen3), Catch::Contains("<|im_start|>"));
    CHECK_THAT(builtin(ChatTemplateKind::kQwen35), Catch::Contains("<|im_start|>"));
    CHECK(identify_chat_template(builtin(ChatTemplateKind::kQwen3)) == ChatTemplateKind::kQwen3);
    CHECK(identify_chat_template(builtin(ChatTemplateKind::kQwen35)) == ChatTemplateKind::kQwen35);
    // The fixture the parity tests render with is the same text as the compiled-in one.
    std::ifstream in(testing::source_path("tests/fixtures/chat/qwen3_5.jinja"));
    const std::string fixture{std::istreambuf_iterator<char>(in), {}};
    CHECK(identify_chat_template(fixture) == ChatTemplateKind::kQwen35);
    // CRLF line ends, trailing spaces and a final newline are not differences.
    const std::string noisy =
        absl::StrReplaceAll(builtin(ChatTemplateKind::kQwen3), {{"\n", "  \r\n"}}) + "\n\n";
    CHECK(identify_chat_template(noisy) == ChatTemplateKind::kQwen3);
    // Any other change is another template.
    std::string edited = builtin(ChatTemplateKind::kQwen3);
    edited.replace(edited.find("<think>"), 7, "<THINK>");
    CHECK_FALSE(identify_chat_template(edited).has_value());
    CHECK_FALSE(identify_chat_template("{{ messages }}").has_value());
}

TEST_CASE("a folder's template: chat_template.jinja, else tokenizer_config.json's",
          "[data][chat]") {
    using Opt = std::optional<std::string>;
    CHECK(*carried_chat_template(Opt("A"), Opt(R"({"chat_template": "B"})")) == Opt("A"));
    CHECK(*carried_chat_template(std::nullopt, Opt(R"({"chat_template": "B"})")) == Opt("B"));
    CHECK(*carried_chat_template(std::nullopt,
                                 Opt(R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                        {"name": "default", "template": "D"}]})")) == Opt("D"));
    CHECK(*carried_chat_template(std::nullopt, Opt(R"({"eos_token": "x"})")) == std::nullopt);
    CHECK(*carried_chat_template(std::nullopt, std::nullopt) == std::nullopt);
    CHECK(carried_chat_template(std::nullopt, Opt("{not json")).status().code() ==
          absl::StatusCode::kInvalidArgument);
    CHECK(carried_chat_template(std::nullopt, Opt(R"({"chat_template": 3})")).status().code() ==
          absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the template a job trains with: named, the base's own, or the vocabulary's",
          "[data][chat]") {
    const std::optional<std::string> qwen3 = builtin(ChatTemplateKind::kQwen3);
    CHECK(*choose_chat_template(151669, "qwen3_5", qwen3) == ChatTemplateKind::kQwen35);
    CHECK(*choose_chat_template(248320, "", qwen3) == ChatTemplateKind::kQwen3);
    CHECK(*choose_chat_template(248320, "", std::nullopt) == ChatTemplateKind::kQwen35);
    CHECK(*choose_chat_template(151669, "", std::nullopt) == ChatTemplateKind::kQwen3);
    const absl::StatusOr<ChatTemplateKind> custom =
        choose_chat_template(248320, "", std::string("{{ messages }}"));
    REQUIRE_FALSE(custom.ok());
    CHECK(custom.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(custom.status().message()), Catch::StartsWith("CHAT_TEMPLATE_UNKNOWN") &&
                                                           Catch::Contains("data.chat_template") &&
                                                           Catch::Contains("qwen3_5"));
    CHECK(*choose_chat_template(248320, "qwen3", std::string("{{ messages }}")) ==
          ChatTemplateKind::kQwen3);
    CHECK_FALSE(choose_chat_template(248320, "llama", std::nullopt).ok());
}

}  // namespace
}  // namespace deltatune
