// Chat lines with tools, tool calls, content parts and weights (runtime/data/chat_json.h), and the
// loss mask they give. Rendering them is checked against transformers in chat_template_test.cc.
#include <catch2/catch.hpp>

#include "runtime/data/chat_json.h"

namespace deltatune {
namespace {

ChatConversation parse(const std::string& line) {
    ChatConversation chat;
    const auto error = parse_chat_line(line, chat);
    INFO(line);
    REQUIRE_FALSE(error);
    return chat;
}

std::string why(const std::string& line) {
    ChatConversation chat;
    const auto error = parse_chat_line(line, chat);
    REQUIRE(error);
    return error->reason + ": " + error->detail;
}

// The trained spans of a rendering, as text.
std::vector<std::string> trained(const ChatConversation& chat, ChatTemplateKind kind) {
    auto rendered = render_chat(chat, kind);
    REQUIRE(rendered.ok());
    std::vector<std::string> spans;
    for (const auto& [begin, end] : rendered->trained)
        spans.push_back(rendered->text.substr(begin, end - begin));
    return spans;
}

TEST_CASE("tool calls are trained as part of the assistant turn, tool responses are not",
          "[data]") {
    const ChatConversation chat = parse(R"({"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]})");
    REQUIRE(chat.messages[1].tool_calls.size() == 1);
    CHECK(chat.tools ==
          std::vector<std::string>{R"({"type": "function", "function": {"name": "get_weather", )"
                                   R"("parameters": {}}})"});
    CHECK(trained(chat, ChatTemplateKind::kQwen3) ==
          std::vector<std::string>{
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
              "\"days\": 2}}\n</tool_call><|im_end|>",
              "<think>\n\n</think>\n\nSunny.<|im_end|>"});
    CHECK(trained(chat, ChatTemplateKind::kQwen35) ==
          std::vector<std::string>{
              "<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
              "Paris\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n"
              "</tool_call><|im_end|>",
              "<think>\n\n</think>\n\nSunny.<|im_end|>"});
}

TEST_CASE("weight 0 leaves an assistant turn untrained", "[data]") {
    const ChatConversation chat = parse(R"({"messages": [{"role": "user", "content": "a"},
        {"role": "assistant", "content": "bad answer", "weight": 0},
        {"role": "user", "content": "b"}, {"role": "assistant", "content": "good", "weight": 1}]})");
    CHECK_FALSE(chat.messages[1].trained);
    CHECK(trained(chat, ChatTemplateKind::kQwen35) ==
          std::vector<std::string>{"<think>\n\n</think>\n\ngood<|im_end|>"});
}

TEST_CASE("content parts are joined; null content reads as empty", "[data]") {
    const ChatConversation chat = parse(R"({"messages": [{"role": "user", "content":
        [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": null}]})");
    CHECK(chat.messages[0].content == "one two");
    CHECK(chat.messages[1].content.empty());
}

TEST_CASE("chat lines the templates cannot render are refused with the field", "[data]") {
    CHECK(why(R"({"messages": [{"role": "user", "content": "a", "weight": 0}]})") ==
          "bad message: messages[0].weight is read on assistant messages only");
    CHECK(why(R"({"messages": [{"role": "assistant", "content": "a", "weight": 0.5}]})") ==
          "bad message: messages[0].weight is 0.5, not 0 or 1");
    CHECK(why(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})") ==
          "bad message: messages[0].tool_calls[0].function.name is missing or not a string");
    CHECK(why(R"({"messages": [{"role": "assistant", "tool_calls": [{"name": "f"}]}]})") ==
          "bad message: messages[0].tool_calls[0].arguments is missing");
    CHECK(why(R"({"messages": [{"role": "user", "content": [{"type": "image_url",
        "image_url": {"url": "x"}}]}]})") ==
          "unsupported content: messages[0].content[0] is an image or video: training reads "
          "text only");
    CHECK(why(R"({"messages": [{"role": "user"}]})") ==
          "bad message: messages[0].content is missing");
    CHECK(why(R"({"messages": [{"role": "user", "content": "a"}], "tools": {}})") ==
          "bad \"tools\": \"tools\" is not a list");
    CHECK(why(R"({"messages": [{"role": "user", "content": "a"}], "functions": []})")
              .starts_with("bad \"functions\": the legacy \"functions\" list is not read"));
    // A JSON error says where.
    CHECK(
        why(R"({"messages": [}])").starts_with("not valid JSON: parse error at line 1, column 15"));
    // Qwen3 prints string arguments as they are; Qwen3.5 needs an object to list parameters.
    const ChatConversation odd = parse(R"({"messages": [{"role": "user", "content": "a"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "[1]"}]}]})");
    CHECK(render_chat(odd, ChatTemplateKind::kQwen3).ok());
    CHECK(render_chat(odd, ChatTemplateKind::kQwen35).status().message() ==
          "tool call 'f': arguments is neither an object nor a string holding one");
}

// The rendered text and its trained spans.
std::pair<std::string, std::vector<std::string>> rendered(const std::string& line,
                                                          ChatTemplateKind kind) {
    const ChatConversation chat = parse(line);
    auto r = render_chat(chat, kind);
    REQUIRE(r.ok());
    return {r->text, trained(chat, kind)};
}

TEST_CASE("ShareGPT conversations render as the same messages would", "[data]") {
    const std::string messages = R"({"messages": [{"role": "system", "content": "s"},
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls":
        [{"name": "f", "arguments": {"x": 1}}]}, {"role": "tool", "content": "r"},
        {"role": "assistant", "content": "a"}],
        "tools": [{"type": "function", "function": {"name": "f"}}]})";
    const std::string sharegpt = R"({"system": "s", "conversations": [
        {"from": "human", "value": "q"},
        {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": {\"x\": 1}}"},
        {"from": "observation", "value": "r"}, {"from": "gpt", "value": "a"}],
        "tools": "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]"})";
    for (const auto kind : {ChatTemplateKind::kQwen3, ChatTemplateKind::kQwen35}) {
        CHECK(rendered(sharegpt, kind) == rendered(messages, kind));
    }
    CHECK(why(R"({"conversations": [{"from": "narrator", "value": "x"}]})") ==
          "bad message: conversations[0].from is 'narrator': expected system, human, gpt, "
          "function_call, observation or tool");
}

TEST_CASE("prompt/completion and text lines", "[data]") {
    const auto kind = ChatTemplateKind::kQwen35;
    // Strings: plain text, the completion and an end of text trained.
    CHECK(
        rendered(R"({"prompt": "2+2=", "completion": "4"})", kind) ==
        std::pair<std::string, std::vector<std::string>>{"2+2=4<|endoftext|>", {"4<|endoftext|>"}});
    // Message lists: the chat template, the completion's assistant turns only.
    const auto [text, spans] = rendered(R"({"prompt": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": "earlier"}, {"role": "user", "content": "again"}],
        "completion": [{"role": "assistant", "content": "yo"}]})",
                                        kind);
    CHECK(text.find("earlier<|im_end|>") != std::string::npos);
    CHECK(spans == std::vector<std::string>{"<think>\n\n</think>\n\nyo<|im_end|>"});
    // Continued pretraining: all of it.
    CHECK(rendered(R"({"text": "plain words"})", kind).second ==
          std::vector<std::string>{"plain words<|endoftext|>"});
    CHECK(why(R"({"prompt": "a"})") == "bad prompt/completion: a line with one needs both");
    CHECK(why(R"({"prompt": "a", "completion": [{"role": "assistant", "content": "b"}]})") ==
          "bad prompt/completion: both strings or both message lists");
    CHECK(why(R"({"text": 5})") == "bad \"text\": \"text\" is not a string");
    CHECK(why(R"({"input": "x"})") ==
          "missing \"messages\": expected \"messages\", \"conversations\" (ShareGPT), "
          "\"prompt\" and \"completion\", or \"text\"");
}

TEST_CASE("floats print as Python's repr", "[data]") {
    for (const auto& [value, text] : std::vector<std::pair<double, std::string>>{
             {1.0, "1.0"},
             {0.1, "0.1"},
             {-2.5, "-2.5"},
             {1e-05, "1e-05"},
             {0.0001, "0.0001"},
             {1e16, "1e+16"},
             {1e15, "1000000000000000.0"},
             {123456.789, "123456.789"},
             {1.5e300, "1.5e+300"},
             {-0.0, "-0.0"},
             {5e-324, "5e-324"},
             {0.30000000000000004, "0.30000000000000004"}}) {
        CHECK(python_float_repr(value) == text);
    }
}

}  // namespace
}  // namespace deltatune
