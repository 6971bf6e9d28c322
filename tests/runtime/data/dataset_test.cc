// Datasets: both line formats parse as documented, tokenization on many threads keeps file order,
// the format is detected, and chat data without a tokenizer is a clear error.
#include <catch2/catch.hpp>

#include <fstream>

#include "nlohmann/json.hpp"
#include "runtime/data/dataset.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

using testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

// Encodes the conversation as [line number, then one id per content byte]; assistant bytes trained.
ChatTokenizer numbered_chat() {
    ChatTokenizer t;
    t.fingerprint = "numbered";
    t.tokenize = [](const ChatConversation& chat) -> absl::StatusOr<Document> {
        const std::vector<ChatMessage>& messages = chat.messages;
        Document d;
        d.input_ids.push_back(std::stoi(messages.at(0).content));
        d.labels.push_back(-100);
        for (const ChatMessage& m : messages) {
            for (unsigned char c : m.content + m.reasoning_content) {
                d.input_ids.push_back(c);
                d.labels.push_back(m.role == "assistant" ? c : -100);
            }
        }
        return d;
    };
    return t;
}

TEST_CASE("chat lines parse roles, content and reasoning_content", "[data]") {
    ChatConversation chat;
    const std::vector<ChatMessage>& m = chat.messages;
    REQUIRE(!parse_chat_line(
        R"({"prompt": "x", "messages": [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "add"}], "prompt_id": "a"})",
        chat));
    REQUIRE(m.size() == 3);
    CHECK(m[0].role == "system");
    CHECK(m[1].content == "2+2?");
    CHECK(!m[1].has_reasoning_content);
    CHECK(m[2].has_reasoning_content);
    CHECK(m[2].reasoning_content == "add");
    // null reasoning_content is how some exporters spell "absent".
    REQUIRE(!parse_chat_line(
        R"({"messages": [{"role": "assistant", "content": "", "reasoning_content": null}]})",
        chat));
    CHECK(!m[0].has_reasoning_content);
    auto e = parse_chat_line(R"({"messages": [{"role": "user", "content": "a"}, 3]})", chat);
    REQUIRE(e);
    CHECK(e->reason == "bad message");
    CHECK(e->detail == "messages[1] is not an object");
}

TEST_CASE("pre-tokenized lines: labels default to input_ids, vocab checked when given", "[data]") {
    Document d;
    REQUIRE(!parse_pretokenized_line(R"({"input_ids": [5, 6, 7]})", 0, d));
    CHECK(d.input_ids == std::vector<int32_t>{5, 6, 7});
    CHECK(d.labels == d.input_ids);
    REQUIRE(!parse_pretokenized_line(R"({"input_ids": [5, 6], "labels": [-100, 6]})", 7, d));
    CHECK(d.labels == std::vector<int32_t>{-100, 6});
    CHECK(!parse_pretokenized_line(R"({"input_ids": [1000000]})", 0, d));  // no vocab: any id
    auto e = parse_pretokenized_line(R"({"input_ids": [5, 7]})", 7, d);
    REQUIRE(e);
    CHECK(e->reason == "bad input_ids");
    CHECK(e->detail == "input_ids[1] = 7 is outside [0, 7)");
}

TEST_CASE("tokenization on many threads keeps file order", "[data]") {
    TempDir tmp;
    const std::string path = tmp.file("chat.jsonl");
    constexpr int kLines = 997;
    {
        std::ofstream out(path, std::ios::binary);
        for (int i = 0; i < kLines; ++i) {
            out << R"({"messages": [{"role": "user", "content": ")" << i
                << R"("}, {"role": "assistant", "content": ")" << std::string(i % 7 + 1, 'a')
                << "\"}]}\n";
            if (i % 100 == 0) out << "\n";  // blank lines are not records
        }
    }
    for (int threads : {1, 2, 5}) {
        DatasetOptions opt;
        opt.chat = numbered_chat();
        opt.num_threads = threads;
        opt.lines_per_chunk = 13;
        auto data = load_dataset(path, opt);
        REQUIRE(data.ok());
        REQUIRE(data->size() == kLines);
        CHECK(data->counts().records == kLines);
        CHECK(data->counts().lines == kLines + 10);
        for (int i = 0; i < kLines; ++i) {
            REQUIRE(data->input_ids(i)[0] == i);
            const std::string digits = std::to_string(i);
            REQUIRE(data->length(i) == 1 + static_cast<int64_t>(digits.size()) + i % 7 + 1);
            CHECK(data->labels(i).back() == 'a');
        }
        CHECK(!data->from_cache());
    }
}

TEST_CASE("format detection passes over a line past the document bound unread", "[data]") {
    // A 200 MB line once peaked a rank at 844 MB: detection read lines up to 256 MiB whatever the
    // job's bound. Here an 8 MiB tokenized line over a 1 MiB bound is not parsed (so it cannot
    // decide the format), and the chat line after it does.
    TempDir tmp;
    const std::string path = tmp.file("long.jsonl");
    std::string ids = "{\"input_ids\": [1";
    while (ids.size() < (8u << 20)) ids += ", 1";
    write_text(path, ids + "]}\n{\"messages\": []}\n");
    CHECK(*detect_dataset_format(path, 1 << 20) == DatasetFormat::kChat);
    CHECK(*detect_dataset_format(path, 16 << 20) == DatasetFormat::kPretokenized);
}

TEST_CASE("one rule tells a line's kind by its keys", "[data]") {
    auto kind = [](const char* text) { return classify_data_line(nlohmann::json::parse(text)); };
    CHECK(kind(R"({"input_ids": [1], "messages": []})") == DataLineKind::kTokenized);
    CHECK(kind(R"({"messages": []})") == DataLineKind::kConversation);
    CHECK(kind(R"({"conversations": []})") == DataLineKind::kConversation);
    CHECK(kind(R"({"prompt": "a", "completion": "b"})") == DataLineKind::kConversation);
    CHECK(kind(R"({"text": "a"})") == DataLineKind::kText);
    CHECK(kind(R"({"input": "a"})") == DataLineKind::kOther);
    // The reader's auto format follows it: a ShareGPT first line is chat.
    TempDir tmp;
    const std::string path = tmp.file("sharegpt.jsonl");
    write_text(path, "{\"conversations\": []}\n{\"input_ids\": [1]}\n");
    CHECK(*detect_dataset_format(path) == DatasetFormat::kChat);
}

TEST_CASE("format detection and the chat-needs-a-tokenizer error", "[data]") {
    TempDir tmp;
    const std::string chat = tmp.file("c.jsonl");
    const std::string tok = tmp.file("t.jsonl");
    write_text(chat, "\n{oops\n{\"messages\": [{\"role\": \"user\", \"content\": \"1\"}]}\n");
    write_text(tok, "{\"input_ids\": [3, 4]}\n");
    CHECK(*detect_dataset_format(chat) == DatasetFormat::kChat);
    CHECK(*detect_dataset_format(tok) == DatasetFormat::kPretokenized);
    auto r = load_dataset(chat, DatasetOptions{});
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(r.status().message()) ==
          chat + ": chat data needs a tokenizer (--tokenizer)");
    auto t = load_dataset(tok, DatasetOptions{});
    REQUIRE(t.ok());
    CHECK(t->size() == 1);
    CHECK(t->document(0).input_ids == std::vector<int32_t>{3, 4});
    CHECK(load_dataset(tmp.file("none.jsonl"), DatasetOptions{}).status().code() ==
          absl::StatusCode::kNotFound);
    CHECK(*parse_dataset_format("pretokenized") == DatasetFormat::kPretokenized);
    CHECK(*parse_chat_template_kind("qwen3") == ChatTemplateKind::kQwen3);
    CHECK(*parse_chat_template_kind("qwen3_5") == ChatTemplateKind::kQwen35);
    CHECK(!parse_chat_template_kind("llama").ok());
}

}  // namespace
}  // namespace deltatune
