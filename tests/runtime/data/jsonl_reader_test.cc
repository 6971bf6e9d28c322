// The streaming JSONL reader and the bad-line policy: lines across buffer boundaries, bounded
// memory on a file larger than the budget, and every malformed-line case reported as
// FILE:LINE: reason (kFail) or counted per reason (kSkipAndCount).
#include <catch2/catch.hpp>

#include <fstream>

#include "runtime/data/dataset.h"
#include "runtime/data/jsonl_reader.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

using testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::pair<int64_t, std::string>> read_all(const std::string& path, size_t buffer,
                                                      size_t max_line) {
    auto r = JsonlReader::open(path, buffer, max_line);
    REQUIRE(r.ok());
    std::vector<std::pair<int64_t, std::string>> out;
    JsonlReader::Line line;
    for (;;) {
        auto more = r->next(line);
        REQUIRE(more.ok());
        if (!*more) break;
        out.emplace_back(line.number, line.too_long ? "<too long>" : std::string(line.text));
    }
    return out;
}

// A stand-in for tokenize_chat: one id per byte of each message, trained on assistant turns.
ChatTokenizer fake_chat() {
    ChatTokenizer t;
    t.fingerprint = "fake";
    t.tokenize = [](const ChatConversation& chat) -> absl::StatusOr<Document> {
        const std::vector<ChatMessage>& messages = chat.messages;
        Document d;
        for (const ChatMessage& m : messages) {
            if (m.role != "user" && m.role != "assistant" && m.role != "system")
                return absl::InvalidArgumentError("unknown role " + m.role);
            for (unsigned char c : m.content) {
                d.input_ids.push_back(c);
                d.labels.push_back(m.role == "assistant" ? c : -100);
            }
        }
        return d;
    };
    return t;
}

TEST_CASE("JSONL lines cross buffer boundaries, CRLF and a missing final newline", "[data]") {
    TempDir tmp;
    const std::string path = tmp.file("a.jsonl");
    write_text(path, "first line\r\n\nthe second line is longer than the buffer\nx\nlast");
    for (size_t buffer : {16, 7, 1 << 20}) {
        const auto lines = read_all(path, buffer, 1 << 20);
        REQUIRE(lines.size() == 5);
        CHECK(lines[0] == std::pair<int64_t, std::string>{1, "first line"});
        CHECK(lines[1] == std::pair<int64_t, std::string>{2, ""});
        CHECK(lines[2] ==
              std::pair<int64_t, std::string>{3, "the second line is longer than the buffer"});
        CHECK(lines[3] == std::pair<int64_t, std::string>{4, "x"});
        CHECK(lines[4] == std::pair<int64_t, std::string>{5, "last"});
    }
    write_text(path, "");
    CHECK(read_all(path, 16, 64).empty());
    CHECK(JsonlReader::open(tmp.file("missing.jsonl")).status().code() ==
          absl::StatusCode::kNotFound);
}

TEST_CASE("a line over the limit is skipped without being stored", "[data]") {
    TempDir tmp;
    const std::string path = tmp.file("a.jsonl");
    write_text(path, "short\n" + std::string(1000, 'x') + "\nafter\n" + std::string(30, 'y'));
    const auto lines = read_all(path, 16, 20);
    REQUIRE(lines.size() == 4);
    CHECK(lines[0].second == "short");
    CHECK(lines[1] == std::pair<int64_t, std::string>{2, "<too long>"});
    CHECK(lines[2] == std::pair<int64_t, std::string>{3, "after"});
    CHECK(lines[3] == std::pair<int64_t, std::string>{4, "<too long>"});
}

TEST_CASE("a file larger than the memory budget streams in bounded memory", "[data]") {
    TempDir tmp;
    const std::string path = tmp.file("big.jsonl");
    constexpr int kLines = 60000;
    {
        std::ofstream out(path, std::ios::binary);
        for (int i = 0; i < kLines; ++i) {
            out << "{\"input_ids\": [" << i % 1000;
            for (int k = 0; k < 25; ++k) out << ", " << (i + k) % 1000;
            out << "]}\n";
        }
    }
    const auto file_bytes = std::filesystem::file_size(path);
    constexpr size_t kBuffer = 64 << 10, kMaxLine = 4 << 10;
    REQUIRE(file_bytes > 100 * kBuffer);  // several MB through a 64 KiB buffer
    auto r = JsonlReader::open(path, kBuffer, kMaxLine);
    REQUIRE(r.ok());
    JsonlReader::Line line;
    int64_t n = 0;
    while (*r->next(line)) ++n;
    CHECK(n == kLines);
    CHECK(r->peak_bytes() <= kBuffer + 2 * kMaxLine);
    INFO("peak " << r->peak_bytes() << " bytes for a " << file_bytes << "-byte file");

    // The dataset pipeline on top holds tokens, not text: same budget, every document read.
    DatasetOptions opt;
    opt.read_buffer_bytes = kBuffer;
    opt.max_line_bytes = kMaxLine;
    opt.num_threads = 2;
    auto data = load_dataset(path, opt);
    REQUIRE(data.ok());
    CHECK(data->size() == kLines);
    CHECK(data->length(kLines - 1) == 26);
    CHECK(data->input_ids(7)[0] == 7);
}

struct BadCase {
    std::string line;
    std::string reason;
};

TEST_CASE("malformed lines: FILE:LINE: reason under fail, counted under skip", "[data]") {
    TempDir tmp;
    const std::string chat_ok =
        R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})";
    const std::vector<BadCase> chat_bad = {
        {"{not json", "not valid JSON"},
        {"[1, 2]", "not a JSON object"},
        {R"({"conversation": []})", "missing \"messages\""},
        {R"({"messages": "hi"})", "bad \"messages\""},
        {R"({"messages": []})", "empty \"messages\""},
        {R"({"messages": [{"role": "user", "content": 5}]})", "bad message"},
        {R"({"messages": [{"role": "user"}]})", "bad message"},
        {R"({"messages": ["hi"]})", "bad message"},
        {R"({"messages": [{"role": "pirate", "content": "arr"}]})", "conversation rejected"},
    };
    const std::string tok_ok = R"({"input_ids": [1, 2, 3], "labels": [-100, 2, 3]})";
    const std::vector<BadCase> tok_bad = {
        {"{\"input_ids\": [1, 2", "not valid JSON"},
        {R"({"ids": [1]})", "missing \"input_ids\""},
        {R"({"input_ids": [1, "2"]})", "bad input_ids"},
        {R"({"input_ids": [1, 2.5]})", "bad input_ids"},
        {R"({"input_ids": [1, 99999999999]})", "bad input_ids"},
        {R"({"input_ids": [1, 1000]})", "bad input_ids"},  // vocab is 1000
        {R"({"input_ids": [-1]})", "bad input_ids"},
        {R"({"input_ids": []})", "empty input_ids"},
        {R"({"input_ids": [1, 2], "labels": [1]})", "labels length mismatch"},
        {R"({"input_ids": [1, 2], "labels": [1, 5000]})", "bad labels"},
        {R"({"input_ids": [1, 2], "labels": "x"})", "bad labels"},
    };
    for (const bool chat : {true, false}) {
        const auto& bad = chat ? chat_bad : tok_bad;
        const std::string& ok = chat ? chat_ok : tok_ok;
        DatasetOptions opt;
        opt.format = chat ? DatasetFormat::kChat : DatasetFormat::kPretokenized;
        opt.chat = fake_chat();
        opt.vocab_size = 1000;
        opt.lines_per_chunk = 3;  // errors land in different chunks and threads
        opt.num_threads = 3;
        for (size_t i = 0; i < bad.size(); ++i) {
            // Good lines around the bad one, so its line number is not trivially 1.
            const std::string path = tmp.file("bad" + std::to_string(i) + ".jsonl");
            write_text(path, ok + "\n\n" + ok + "\n" + bad[i].line + "\n" + ok + "\n");
            opt.bad_lines = BadLinePolicy::kFail;
            auto r = load_dataset(path, opt);
            INFO(bad[i].line);
            REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
            CHECK(std::string(r.status().message()).rfind(path + ":4: " + bad[i].reason, 0) == 0);
            opt.bad_lines = BadLinePolicy::kSkipAndCount;
            r = load_dataset(path, opt);
            REQUIRE(r.ok());
            CHECK(r->size() == 3);
            CHECK(r->counts().skipped == 1);
            CHECK(r->counts().by_reason.at(bad[i].reason) == 1);
        }
        // All at once: every line counted under its reason, the good ones kept in order.
        std::string text;
        std::map<std::string, int64_t> expected;
        for (const BadCase& b : bad) {
            text += ok + "\n" + b.line + "\n";
            ++expected[b.reason];
        }
        const std::string path = tmp.file(chat ? "all_chat.jsonl" : "all_tok.jsonl");
        write_text(path, text);
        opt.bad_lines = BadLinePolicy::kSkipAndCount;
        auto r = load_dataset(path, opt);
        REQUIRE(r.ok());
        CHECK(r->size() == static_cast<int64_t>(bad.size()));
        CHECK(r->counts().lines == static_cast<int64_t>(2 * bad.size()));
        CHECK(r->counts().records == static_cast<int64_t>(bad.size()));
        CHECK(r->counts().skipped == static_cast<int64_t>(bad.size()));
        CHECK(r->counts().by_reason == expected);
        // Under kFail the first bad line in file order wins, whichever thread saw it.
        opt.bad_lines = BadLinePolicy::kFail;
        CHECK(std::string(load_dataset(path, opt).status().message())
                  .rfind(path + ":2: " + bad[0].reason, 0) == 0);
    }
}

TEST_CASE("an over-long line is a bad line like any other", "[data]") {
    TempDir tmp;
    const std::string path = tmp.file("long.jsonl");
    write_text(path, "{\"input_ids\": [1]}\n{\"input_ids\": [" + std::string(200, '1') + "]}\n");
    DatasetOptions opt;
    opt.max_line_bytes = 100;
    auto r = load_dataset(path, opt);
    CHECK(std::string(r.status().message()) ==
          path + ":2: line too long: longer than max_document_bytes (100)");
    opt.bad_lines = BadLinePolicy::kSkipAndCount;
    r = load_dataset(path, opt);
    REQUIRE(r.ok());
    CHECK(r->counts().by_reason.at("line too long") == 1);
}

TEST_CASE("a document over max_document_tokens is a bad line, counted when skipped", "[data]") {
    TempDir tmp;
    const std::string path = tmp.file("big.jsonl");
    std::string ids = "1";
    for (int i = 0; i < 99; ++i) ids += ", 1";
    write_text(path, "{\"input_ids\": [1, 2]}\n{\"input_ids\": [" + ids + "]}\n");
    DatasetOptions opt;
    opt.max_document_tokens = 64;
    auto r = load_dataset(path, opt);
    CHECK(std::string(r.status().message()) ==
          path + ":2: document too long: 100 tokens, more than max_document_tokens (64)");
    opt.bad_lines = BadLinePolicy::kSkipAndCount;
    r = load_dataset(path, opt);
    REQUIRE(r.ok());
    CHECK(r->size() == 1);
    CHECK(r->counts().by_reason.at("document too long") == 1);
}

TEST_CASE("bad-line policy names", "[data]") {
    CHECK(*parse_bad_line_policy("fail") == BadLinePolicy::kFail);
    CHECK(*parse_bad_line_policy("skip") == BadLinePolicy::kSkipAndCount);
    CHECK(!parse_bad_line_policy("ignore").ok());
}

}  // namespace
}  // namespace deltatune

namespace deltatune {
namespace {

TEST_CASE("JSON line errors say where, in UTF-8", "[data]") {
    CHECK_FALSE(json_line_error(R"({"a": [1, 2]})"));
    CHECK(json_line_error(std::string("{\"a\": 1}\0x", 10)) == "NUL byte at column 9");
    CHECK(*json_line_error("{\"a\": \"\xff\"}") ==
          "parse error at line 1, column 8: syntax error while parsing value - invalid string: "
          "ill-formed UTF-8 byte; last read: '\"\\xFF'");
    CHECK(json_line_error("[1,")->starts_with("parse error at line 1, column 4: "));
}

}  // namespace
}  // namespace deltatune
