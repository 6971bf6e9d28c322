// The token cache: a second load maps the cache without tokenizing, a changed data file or
// tokenizer fingerprint misses, and a corrupt or truncated cache is detected and rebuilt.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/token_cache.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

// Counts calls, so a test can tell a cache hit from a retokenisation.
ChatTokenizer counting_chat(std::atomic<int>& calls, const std::string& fingerprint) {
    ChatTokenizer t;
    t.fingerprint = fingerprint;
    t.tokenize = [&calls](const ChatConversation& chat) -> absl::StatusOr<Document> {
        const std::vector<ChatMessage>& messages = chat.messages;
        ++calls;
        Document d;
        for (const ChatMessage& m : messages) {
            for (unsigned char c : m.content) {
                d.input_ids.push_back(c);
                d.labels.push_back(m.role == "assistant" ? c : -100);
            }
        }
        return d;
    };
    return t;
}

std::string chat_lines(int n, char letter) {
    std::string s;
    for (int i = 0; i < n; ++i) {
        s += R"({"messages": [{"role": "user", "content": "q)" + std::to_string(i) +
             R"("}, {"role": "assistant", "content": ")" + std::string(i % 5 + 1, letter) +
             "\"}]}\n";
    }
    return s;
}

std::vector<std::vector<int32_t>> all_ids(const TokenizedDataset& d) {
    std::vector<std::vector<int32_t>> out;
    for (int64_t i = 0; i < d.size(); ++i) {
        out.emplace_back(d.input_ids(i).begin(), d.input_ids(i).end());
        auto labels = d.labels(i);
        out.emplace_back(labels.begin(), labels.end());
    }
    return out;
}

TEST_CASE("Hash64 is XXH64 and streams", "[data]") {
    CHECK(Hash64().digest() == 0xEF46DB3751D8E999ull);
    CHECK(Hash64().update("a").digest() == 0xD24EC4F1A98C6E5Bull);
    CHECK(Hash64().update("abc").digest() == 0x44BC2CF5AD770999ull);
    std::string text;
    for (int i = 0; i < 1000; ++i) text += static_cast<char>(i * 7 + 3);
    const uint64_t whole = Hash64().update(text).digest();
    for (size_t piece : {1, 5, 31, 32, 33, 100}) {
        Hash64 h;
        for (size_t at = 0; at < text.size(); at += piece)
            h.update(std::string_view(text).substr(at, piece));
        CHECK(h.digest() == whole);
    }
    CHECK(Hash64().update_field("ab").update_field("c").digest() !=
          Hash64().update_field("a").update_field("bc").digest());
}

TEST_CASE("a cache hit maps the file and does not tokenize again", "[data]") {
    TempDir tmp;
    const std::string data = tmp.file("chat.jsonl");
    write_text(data, chat_lines(300, 'a') + "{bad\n");
    std::atomic<int> calls{0};
    DatasetOptions opt;
    opt.chat = counting_chat(calls, "tok-A");
    opt.cache_dir = tmp.file("cache");
    opt.bad_lines = BadLinePolicy::kSkipAndCount;
    opt.num_threads = 2;
    opt.lines_per_chunk = 32;
    auto first = load_dataset(data, opt);
    REQUIRE(first.ok());
    CHECK(calls == 300);
    CHECK(first->from_cache());  // written, then mapped
    CHECK(fs::exists(first->cache_path()));
    CHECK(fs::path(first->cache_path()).parent_path() == fs::path(opt.cache_dir));

    auto second = load_dataset(data, opt);
    REQUIRE(second.ok());
    CHECK(calls == 300);  // no tokenizer call at all
    CHECK(second->cache_path() == first->cache_path());
    CHECK(all_ids(*second) == all_ids(*first));
    CHECK(second->counts().skipped == 1);  // the build's bad-line counts come back too
    CHECK(second->counts().by_reason.at("not valid JSON") == 1);
    CHECK(second->counts().lines == 301);

    // The uncached load agrees with the mapped one.
    DatasetOptions plain = opt;
    plain.cache_dir.clear();
    auto uncached = load_dataset(data, plain);
    REQUIRE(uncached.ok());
    CHECK(all_ids(*uncached) == all_ids(*second));
}

TEST_CASE("ranks that miss the cache together tokenize once and map the result", "[data]") {
    TempDir tmp;
    const std::string data = tmp.file("chat.jsonl");
    write_text(data, chat_lines(400, 'a'));
    std::atomic<int> calls{0};
    DatasetOptions opt;
    opt.chat = counting_chat(calls, "tok-A");
    opt.cache_dir = tmp.file("cache");
    opt.num_threads = 1;
    // Four loaders at once, as the ranks of a node start: one builds, three wait on its lock.
    std::vector<absl::StatusOr<TokenizedDataset>> got(4, absl::UnknownError("not run"));
    std::vector<std::thread> ranks;
    for (size_t r = 0; r < got.size(); ++r) {
        ranks.emplace_back([&, r] { got[r] = load_dataset(data, opt); });
    }
    for (std::thread& t : ranks) t.join();
    CHECK(calls == 400);  // each conversation tokenized once, not once per rank
    for (const auto& d : got) {
        REQUIRE(d.ok());
        CHECK(d->cache_path() == got[0]->cache_path());
        CHECK(all_ids(*d) == all_ids(*got[0]));
    }
}

TEST_CASE("a changed data file or tokenizer misses the cache", "[data]") {
    TempDir tmp;
    const std::string data = tmp.file("chat.jsonl");
    write_text(data, chat_lines(50, 'a'));
    std::atomic<int> calls{0};
    DatasetOptions opt;
    opt.chat = counting_chat(calls, "tok-A");
    opt.cache_dir = tmp.file("cache");
    auto a = load_dataset(data, opt);
    REQUIRE(a.ok());
    REQUIRE(calls == 50);

    // Same size and the same mtime, different bytes: only a content hash notices.
    const auto mtime = fs::last_write_time(data);
    write_text(data, chat_lines(50, 'b'));
    fs::last_write_time(data, mtime);
    auto b = load_dataset(data, opt);
    REQUIRE(b.ok());
    CHECK(calls == 100);
    CHECK(b->cache_path() != a->cache_path());
    CHECK(b->labels(0).back() == 'b');

    opt.chat = counting_chat(calls, "tok-B");
    auto c = load_dataset(data, opt);
    REQUIRE(c.ok());
    CHECK(calls == 150);
    CHECK(c->cache_path() != b->cache_path());
    opt.bad_lines = BadLinePolicy::kSkipAndCount;  // the policy changes what is kept
    REQUIRE(load_dataset(data, opt).ok());
    CHECK(calls == 200);
    REQUIRE(load_dataset(data, opt).ok());
    CHECK(calls == 200);
}

TEST_CASE("a corrupt or truncated cache is detected and rebuilt", "[data]") {
    TempDir tmp;
    const std::string data = tmp.file("chat.jsonl");
    write_text(data, chat_lines(40, 'a'));
    std::atomic<int> calls{0};
    DatasetOptions opt;
    opt.chat = counting_chat(calls, "tok-A");
    opt.cache_dir = tmp.file("cache");
    auto good = load_dataset(data, opt);
    REQUIRE(good.ok());
    const std::string cache = good->cache_path();
    const auto expected = all_ids(*good);
    const auto size = fs::file_size(cache);
    const uint64_t key = *dataset_cache_key(data, DatasetFormat::kChat, opt);

    // One flipped bit in the token payload, then a torn file, then garbage.
    const std::vector<std::function<void()>> damage = {
        [&] {
            std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(static_cast<std::streamoff>(size - 5));
            char c;
            f.seekg(static_cast<std::streamoff>(size - 5));
            f.get(c);
            f.seekp(static_cast<std::streamoff>(size - 5));
            f.put(static_cast<char>(c ^ 1));
        },
        [&] { fs::resize_file(cache, size - 100); },
        [&] { fs::resize_file(cache, 10); },
    };
    int expected_calls = 40;
    for (const auto& hurt : damage) {
        hurt();
        CHECK(open_token_cache(cache, key).status().code() == absl::StatusCode::kDataLoss);
        auto rebuilt = load_dataset(data, opt);
        REQUIRE(rebuilt.ok());
        expected_calls += 40;
        CHECK(calls == expected_calls);
        CHECK(all_ids(*rebuilt) == expected);
        CHECK(open_token_cache(cache, key).ok());  // the rebuild replaced the bad file
    }
    CHECK(open_token_cache(cache, key ^ 1).status().code() ==
          absl::StatusCode::kFailedPrecondition);
    CHECK(open_token_cache(tmp.file("nope"), key).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("an empty dataset round-trips through the cache", "[data]") {
    TempDir tmp;
    const std::string path = tmp.file("empty.dtcache");
    REQUIRE(write_token_cache(path, 7, TokenStore{}, BadLineCounts{}).ok());
    auto d = open_token_cache(path, 7);
    REQUIRE(d.ok());
    CHECK(d->size() == 0);
    CHECK(d->total_tokens() == 0);
}

}  // namespace
}  // namespace deltatune
