// The coded Qwen3 / Qwen3.5 chat templates against the models' own Jinja templates rendered by
// transformers (tests/fixtures/chat/conversations.jsonl,
// scripts/fixtures/make_chat_template_fixtures.py), and the assistant loss mask.
#include <catch2/catch.hpp>

#include <fstream>

#include "nlohmann/json.hpp"
#include "runtime/data/chat_json.h"
#include "runtime/data/chat_template.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

ChatMessage message(std::string role, std::string content) {
    ChatMessage m;
    m.role = std::move(role);
    m.content = std::move(content);
    return m;
}

void check_spans(const RenderedChat& chat) {
    for (const auto& [begin, end] : chat.trained) {
        REQUIRE(begin >= 22);
        CHECK(chat.text.substr(begin - 22, 22) == "<|im_start|>assistant\n");
        CHECK(chat.text.substr(end - 10, 10) == "<|im_end|>");
    }
}

TEST_CASE("chat templates render exactly what the models' Jinja templates render", "[data]") {
    std::ifstream in(testing::source_path("tests/fixtures/chat/conversations.jsonl"));
    REQUIRE(in.good());
    std::string line;
    int rendered = 0, errors = 0, lines = 0;
    while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line);
        ChatConversation conversation;
        const auto parse_error = parse_chat_line(line, conversation);
        REQUIRE_FALSE(parse_error);
        for (const auto& [key, kind] : {std::pair{"qwen3", ChatTemplateKind::kQwen3},
                                        std::pair{"qwen3_5", ChatTemplateKind::kQwen35}}) {
            INFO("line " << lines + 1 << " template " << key);
            auto chat = render_chat(conversation, kind);
            if (j[key].is_object()) {
                CHECK_FALSE(chat.ok());
                if (!chat.ok()) {
                    const std::string theirs = j[key]["error"].get<std::string>();
                    CHECK(theirs.find(std::string(chat.status().message()).substr(0, 20)) !=
                          std::string::npos);
                }
                ++errors;
                continue;
            }
            REQUIRE(chat.ok());
            CHECK(chat->text == j[key].get<std::string>());
            check_spans(*chat);
            ++rendered;
        }
        ++lines;
    }
    CHECK(lines >= 400);
    WARN(rendered << " renders equal to transformers' Jinja output, " << errors
                  << " expected template errors");
}

TEST_CASE("the loss mask covers assistant generations and their <|im_end|> only", "[data]") {
    ChatConversation m;
    m.messages = {message("system", "be brief"), message("user", "hi"),
                  message("assistant", "hello"), message("user", "and?"),
                  message("assistant", "done")};
    m.messages.back().reasoning_content = "why";
    m.messages.back().has_reasoning_content = true;
    auto chat = render_chat(m, ChatTemplateKind::kQwen35);
    REQUIRE(chat.ok());
    REQUIRE(chat->trained.size() == 2);
    auto span = [&](size_t i) {
        return chat->text.substr(chat->trained[i].first,
                                 chat->trained[i].second - chat->trained[i].first);
    };
    CHECK(span(0) == "hello<|im_end|>");
    CHECK(span(1) == "<think>\nwhy\n</think>\n\ndone<|im_end|>");
    CHECK(render_chat({}, ChatTemplateKind::kQwen3).status().message() == "No messages provided.");
    ChatConversation narrator;
    narrator.messages = {message("narrator", "x")};
    CHECK_FALSE(render_chat(narrator, ChatTemplateKind::kQwen3).ok());
}

}  // namespace
}  // namespace deltatune
