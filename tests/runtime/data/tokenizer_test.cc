// Tokenizer against the Hugging Face `tokenizers` library: the corpus fixture made by
// scripts/fixtures/make_tokenizer_fixtures.py holds, for ~2,400 strings and three tokenizer.json
// files (Qwen3, Qwen3.5, and a "flags" variant exercising lstrip / rstrip / single_word /
// normalized added tokens, ignore_merges and a ByteLevel regex with prefix space), the library's
// ids, offsets and decodes. Plus UTF-8 repair, load errors, small hand-made tokenizers and threads.
#include "runtime/data/tokenizer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "runtime/data/normalizer.h"
#include "runtime/data/utf8.h"
#include "tests/common/test_util.h"

#ifndef DT_TOKENIZER_FIXTURES
#define DT_TOKENIZER_FIXTURES DT_BINARY_DIR "/fixtures/tokenizer"
#endif

namespace deltatune {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const char* const kNames[] = {"qwen3", "qwen3_5", "flags"};

// The unpacked fixtures: configure time puts them in the build tree; where that tree is absent
// (binaries run on another machine) the archive from the source tree is unpacked once.
std::string fixtures_dir() {
    if (const char* env = std::getenv("DELTATUNE_TOKENIZER_FIXTURES"); env && *env) return env;
    if (fs::exists(fs::path(DT_TOKENIZER_FIXTURES) / "corpus.jsonl")) return DT_TOKENIZER_FIXTURES;
    static const std::string dir = [] {
        const fs::path d = fs::temp_directory_path() / "deltatune_tokenizer_fixtures";
        if (!fs::exists(d / "corpus.jsonl")) {
            fs::create_directories(d);
            std::string out;
            const std::string archive =
                testing::source_path("tests/fixtures/tokenizer/tokenizers.tar.xz");
            REQUIRE(testing::run_command("tar -xJf '" + archive + "' -C '" + d.string() + "'",
                                         out) == 0);
        }
        return d.string();
    }();
    return dir;
}

struct Item {
    std::string cat;
    std::string input;  // what is encoded: the text, or the ill-formed bytes
    std::string text;   // valid UTF-8: the text, or the bytes with U+FFFD replacements
    std::optional<size_t> invalid_at;
    bool nfc = true;  // NFC leaves the text unchanged
    json expect;      // per tokenizer name: ids, offsets, decoded, decoded_skip, reencode_fail
};

const std::vector<Item>& corpus() {
    static const std::vector<Item> items = [] {
        std::vector<Item> v;
        std::ifstream in(fixtures_dir() + "/corpus.jsonl");
        REQUIRE(in);
        std::string line;
        while (std::getline(in, line)) {
            json j = json::parse(line);
            Item it;
            it.cat = j["cat"];
            it.text = j["text"];
            it.input = it.text;
            if (j.contains("b64")) {
                REQUIRE(absl::Base64Unescape(j["b64"].get<std::string>(), &it.input));
                it.invalid_at = j["invalid_at"].get<size_t>();
            }
            it.nfc = j["nfc"];
            for (const char* name : kNames) it.expect[name] = std::move(j[name]);
            v.push_back(std::move(it));
        }
        return v;
    }();
    return items;
}

const Tokenizer& tokenizer(const std::string& name) {
    static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
    auto& t = cache[name];
    if (!t) {
        auto loaded = Tokenizer::load(fixtures_dir() + "/" + name);
        INFO(loaded.status().ToString());
        REQUIRE(loaded.ok());
        t = *std::move(loaded);
    }
    return *t;
}

std::string show(std::string_view s) {
    std::string out;
    for (unsigned char c : s.substr(0, 120)) {
        if (c < 0x20 || c == 0x7F) {
            out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    return s.size() > 120 ? out + "..." : out;
}

// Collects the first few failures of a loop, shown with the loop's final CHECK (per-item
// assertions in between would otherwise swallow UNSCOPED_INFO messages).
#define REPORT(msg)                \
    do {                           \
        std::ostringstream o_;     \
        o_ << msg;                 \
        report += o_.str() + "\n"; \
    } while (0)

template <typename T>
std::string show_ids(const std::vector<T>& v) {
    std::ostringstream o;
    for (size_t i = 0; i < v.size() && i < 40; ++i) o << (i ? "," : "") << v[i];
    return o.str();
}

}  // namespace

TEST_CASE("sanitize_utf8 and first_invalid_utf8 follow Python's errors=replace", "[tokenizer]") {
    CHECK(sanitize_utf8("plain ascii") == "plain ascii");
    CHECK(sanitize_utf8("h\xC3\xA9 \xF0\x9F\x98\x80") == "h\xC3\xA9 \xF0\x9F\x98\x80");
    CHECK_FALSE(first_invalid_utf8("h\xC3\xA9 \xF0\x9F\x98\x80").has_value());
    // Maximal subparts: a truncated sequence is one U+FFFD, an impossible byte is one each.
    CHECK(sanitize_utf8("a\xF0\x9F\x98") == "a\xEF\xBF\xBD");
    CHECK(sanitize_utf8("\xE0\x80\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(sanitize_utf8("\xED\xA0\x80x") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx");
    const std::string fffd = "\xEF\xBF\xBD";
    CHECK(sanitize_utf8("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);
    CHECK(sanitize_utf8("\xE2\x28\xA1") == "\xEF\xBF\xBD(\xEF\xBF\xBD");
    CHECK(sanitize_utf8(std::string("a\0b", 3)) == std::string("a\0b", 3));
    CHECK(first_invalid_utf8("abc\xC3") == 3u);
    CHECK(first_invalid_utf8("\xC0\x80") == 0u);

    size_t n = 0;
    for (const Item& it : corpus()) {
        if (!it.invalid_at) {
            CHECK_FALSE(first_invalid_utf8(it.input).has_value());
            continue;
        }
        ++n;
        INFO(it.cat << ": " << show(it.input));
        CHECK(sanitize_utf8(it.input) == it.text);
        CHECK(first_invalid_utf8(it.input) == it.invalid_at);
    }
    CHECK(n >= 150);
}

TEST_CASE("utf8proc has the Unicode version the NFC exception table was made for", "[tokenizer]") {
    // normalizer.cc lists the code points utf8proc normalises but the library does not; a newer
    // utf8proc needs that table regenerated (make_tokenizer_fixtures.py --nfc-table).
    CHECK(std::string_view(tok::nfc_unicode_version()) == tok::kNfcTableUnicode);
}

TEST_CASE("ids match the tokenizers library on the corpus", "[tokenizer]") {
    for (const char* name : kNames) {
        const Tokenizer& tok = tokenizer(name);
        size_t bad = 0;
        std::string report;
        for (const Item& it : corpus()) {
            auto ids = tok.encode(it.text);
            REQUIRE(ids.ok());
            const auto expected = it.expect[name]["ids"].get<std::vector<int32_t>>();
            if (*ids == expected) continue;
            if (++bad <= 5) {
                REPORT(name << " [" << it.cat << "] " << show(it.text) << "\n  ours: "
                            << show_ids(*ids) << "\n  want: " << show_ids(expected));
            }
        }
        INFO(name << ": " << bad << " of " << corpus().size() << " strings differ\n" << report);
        CHECK(corpus().size() >= 2000);
        CHECK(bad == 0);
    }
}

TEST_CASE("decode matches the library and round-trips where it does", "[tokenizer]") {
    for (const char* name : kNames) {
        const Tokenizer& tok = tokenizer(name);
        size_t bad = 0, round_trips = 0;
        std::string report;
        for (const Item& it : corpus()) {
            const json& e = it.expect[name];
            const auto ids = e["ids"].get<std::vector<int32_t>>();
            const std::string want = e.value("decoded", it.text);
            const std::string want_skip = e.value("decoded_skip", want);
            round_trips += !e.contains("decoded");
            auto plain = tok.decode(ids), skip = tok.decode(ids, true);
            REQUIRE(plain.ok());
            REQUIRE(skip.ok());
            if (*plain == want && *skip == want_skip) continue;
            if (++bad <= 5) {
                REPORT(name << " [" << it.cat << "] " << show(it.text)
                            << "\n  ours: " << show(*plain) << " / " << show(*skip));
            }
        }
        INFO(name << ": " << bad << " decodes differ\n" << report);
        CHECK(bad == 0);
        // The flags variant's prefix space keeps most of its decodes from round-tripping.
        if (std::string(name) != "flags") CHECK(round_trips > corpus().size() * 3 / 4);
    }
}

TEST_CASE("offsets match the library and re-encode where it says so", "[tokenizer]") {
    for (const char* name : kNames) {
        const Tokenizer& tok = tokenizer(name);
        size_t bad = 0, compared = 0, reencoded = 0;
        std::string report;
        for (const Item& it : corpus()) {
            const json& e = it.expect[name];
            auto enc = tok.encode_with_offsets(it.text);
            REQUIRE(enc.ok());
            REQUIRE(enc->offsets.size() == enc->ids.size());
            if (enc->ids != e["ids"].get<std::vector<int32_t>>()) continue;  // reported above
            const auto ref = e["offsets"].get<std::vector<std::pair<size_t, size_t>>>();
            std::vector<size_t> fails = e.value("reencode_fail", std::vector<size_t>());
            for (size_t k = 0; k < ref.size(); ++k) {
                const auto [b, end] = enc->offsets[k];
                std::string why;
                if (b >= end || end > it.text.size()) {
                    why = "empty or out of range";
                } else if (it.nfc && enc->offsets[k] != ref[k]) {
                    why = "differs from the library on NFC text";
                } else if (!it.nfc && (b > ref[k].first || end < ref[k].second)) {
                    // Across a normalisation change ours covers the whole changed span, the
                    // library's the first character of it.
                    why = "does not contain the library's span";
                } else if (enc->offsets[k] == ref[k]) {
                    // The text under the offsets encodes back to this token alone exactly
                    // when the library's does.
                    ++compared;
                    auto again = tok.encode(std::string_view(it.text).substr(b, end - b));
                    REQUIRE(again.ok());
                    const bool alone = *again == std::vector<int32_t>{enc->ids[k]};
                    reencoded += alone;
                    if (alone == std::binary_search(fails.begin(), fails.end(), k)) {
                        why = "re-encoding disagrees with the library";
                    }
                }
                if (why.empty()) continue;
                if (++bad <= 5) {
                    REPORT(name << " [" << it.cat << "] " << show(it.text) << " token " << k << " ("
                                << enc->ids[k] << ") at [" << b << "," << end << ") vs ["
                                << ref[k].first << "," << ref[k].second << "): " << why);
                }
            }
        }
        INFO(name << ": " << bad << " bad offsets; " << reencoded << " of " << compared
                  << " tokens re-encode alone\n"
                  << report);
        CHECK(bad == 0);
        CHECK(compared > 100000);
    }
}

TEST_CASE("encode rejects ill-formed UTF-8 with its byte offset", "[tokenizer]") {
    const Tokenizer& tok = tokenizer("qwen3_5");
    for (const Item& it : corpus()) {
        if (!it.invalid_at) continue;
        auto ids = tok.encode(it.input);
        REQUIRE_FALSE(ids.ok());
        CHECK(ids.status().code() == absl::StatusCode::kInvalidArgument);
        const std::string want = "byte offset " + std::to_string(*it.invalid_at) + " ";
        CHECK_THAT(std::string(ids.status().message()), Catch::Contains(want));
        CHECK_FALSE(tok.encode_with_offsets(it.input).ok());
        auto repaired = tok.encode(sanitize_utf8(it.input));
        REQUIRE(repaired.ok());
        CHECK(*repaired == it.expect["qwen3_5"]["ids"].get<std::vector<int32_t>>());
    }
}

TEST_CASE("loaded Qwen tokenizers expose their vocabulary", "[tokenizer]") {
    const Tokenizer& q3 = tokenizer("qwen3");
    const Tokenizer& q35 = tokenizer("qwen3_5");
    CHECK(q3.vocab_size() == 151669);
    CHECK(q35.vocab_size() == 248077);
    CHECK(q3.token_to_id("<|im_end|>") == 151645);
    CHECK(q35.token_to_id("<|im_end|>") == 248046);
    CHECK(q3.token_to_id("\xC4\xA0the") == 279);  // "Ġthe"
    CHECK_FALSE(q3.token_to_id("no such token").has_value());
    REQUIRE(q3.added_tokens().size() == 26);
    CHECK(q3.added_tokens()[0].content == "<|endoftext|>");
    CHECK(q3.added_tokens()[0].special);
    CHECK_FALSE(q3.added_tokens()[25].special);  // </think>
    CHECK(q3.fingerprint().size() == 64);
    CHECK(q3.fingerprint() != q35.fingerprint());
    auto bad = q3.decode({151669});
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_FALSE(q3.decode({-1}).ok());
}

namespace {

// A small valid tokenizer.json: every byte, a few merges, two added tokens.
json tiny_tokenizer() {
    json vocab = json::object();
    const auto& bl = tok::byte_level_table();
    for (int b = 0; b < 256; ++b) vocab[bl.byte_to_utf8[static_cast<size_t>(b)]] = b;
    vocab["ab"] = 256;
    vocab["abc"] = 257;
    vocab["xyz"] = 258;  // reachable only through ignore_merges
    vocab["xy"] = 259;
    json added = json::array();
    added.push_back(
        json{{"id", 260}, {"content", "<s>"}, {"special", true}, {"normalized", false}});
    added.push_back(
        json{{"id", 261}, {"content", "[x]"}, {"special", false}, {"normalized", false}});
    json split = {{"type", "Split"},
                  {"pattern", json{{"Regex", R"(\s+|[^\s]+)"}}},
                  {"behavior", "Isolated"},
                  {"invert", false}};
    json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    json model = {{"type", "BPE"},
                  {"vocab", vocab},
                  {"merges", json::array({"a b", "ab c", "x y"})},
                  {"ignore_merges", false}};
    json j = json::object();
    j["version"] = "1.0";
    j["truncation"] = nullptr;
    j["padding"] = nullptr;
    j["added_tokens"] = added;
    j["normalizer"] = json{{"type", "NFC"}};
    j["pre_tokenizer"] =
        json{{"type", "Sequence"}, {"pretokenizers", json::array({split, byte_level})}};
    j["post_processor"] = nullptr;
    j["decoder"] = json{{"type", "ByteLevel"}};
    j["model"] = model;
    return j;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> load_json(const testing::TempDir& dir, const json& j,
                                                     int indent = -1) {
    std::ofstream(dir.file("tokenizer.json")) << j.dump(indent);
    return Tokenizer::load(dir.file("tokenizer.json"));
}

}  // namespace

TEST_CASE("small tokenizer: merges, ignore_merges, added tokens, fingerprint", "[tokenizer]") {
    testing::TempDir dir;
    json j = tiny_tokenizer();
    auto t = load_json(dir, j);
    INFO(t.status().ToString());
    REQUIRE(t.ok());
    CHECK((*t)->encode("abc xyz<s>[x]").value() ==
          std::vector<int32_t>{257, ' ', 259, 'z', 260, 261});
    CHECK((*t)->decode({257, 260, 261}).value() == "abc<s>[x]");
    CHECK((*t)->decode({257, 260, 261}, true).value() == "abc[x]");
    CHECK((*t)->vocab_size() == 262);
    const std::string fp = (*t)->fingerprint();

    // Same content, other formatting and merge spelling: same fingerprint.
    json pairs = j;
    pairs["model"]["merges"] =
        json::array({json::array({"a", "b"}), json::array({"ab", "c"}), json::array({"x", "y"})});
    auto t2 = load_json(dir, pairs, 2);
    REQUIRE(t2.ok());
    CHECK((*t2)->fingerprint() == fp);

    j["model"]["ignore_merges"] = true;
    auto t3 = load_json(dir, j);
    REQUIRE(t3.ok());
    CHECK((*t3)->encode("xyz").value() == std::vector<int32_t>{258});
    CHECK((*t3)->fingerprint() != fp);

    // A directory is read through its tokenizer.json.
    auto t4 = Tokenizer::load(dir.str());
    REQUIRE(t4.ok());
    CHECK((*t4)->fingerprint() == (*t3)->fingerprint());
}

TEST_CASE("load errors name the file and the field", "[tokenizer]") {
    testing::TempDir dir;
    auto missing = Tokenizer::load(dir.file("absent.json"));
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(missing.status().message()), Catch::Contains("absent.json"));

    std::ofstream(dir.file("tokenizer.json")) << "{\"model\": [1, 2";
    auto garbage = Tokenizer::load(dir.file("tokenizer.json"));
    REQUIRE_FALSE(garbage.ok());
    CHECK(garbage.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(garbage.status().message()), Catch::Contains("tokenizer.json"));
    CHECK_THAT(std::string(garbage.status().message()), Catch::Contains("not valid JSON"));

    struct Case {
        const char* field;
        std::function<void(json&)> edit;
    };
    const std::vector<Case> cases = {
        {"model.type", [](json& j) { j["model"]["type"] = "Unigram"; }},
        {"normalizer.type",
         [](json& j) {
             j["normalizer"] = {{"type", "Lowercase"}};
         }},
        {"normalizer.normalizers[1].type",
         [](json& j) {
             j["normalizer"] = {
                 {"type", "Sequence"},
                 {"normalizers", json::array({json{{"type", "NFC"}}, json{{"type", "NFKC"}}})}};
         }},
        {"pre_tokenizer.type",
         [](json& j) {
             j["pre_tokenizer"] = {{"type", "Whitespace"}};
         }},
        {"pre_tokenizer.pretokenizers[0].behavior",
         [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }},
        {"pre_tokenizer.pretokenizers[0].pattern",
         [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; }},
        {"model.merges[1]", [](json& j) { j["model"]["merges"][1] = "ab q"; }},
        {"model.merges[2]", [](json& j) { j["model"]["merges"][2] = "x"; }},
        {"model.byte_fallback", [](json& j) { j["model"]["byte_fallback"] = true; }},
        {"model.dropout", [](json& j) { j["model"]["dropout"] = 0.1; }},
        {"model.vocab", [](json& j) { j["model"]["vocab"] = json::array(); }},
        {"decoder.type",
         [](json& j) {
             j["decoder"] = {{"type", "WordPiece"}};
         }},
        {"post_processor.type",
         [](json& j) {
             j["post_processor"] = {{"type", "TemplateProcessing"}};
         }},
        {"added_tokens[1].content", [](json& j) { j["added_tokens"][1]["content"] = 7; }},
        {"truncation",
         [](json& j) {
             j["truncation"] = {{"max_length", 8}};
         }},
    };
    for (const Case& c : cases) {
        json j = tiny_tokenizer();
        c.edit(j);
        auto t = load_json(dir, j);
        INFO(c.field);
        REQUIRE_FALSE(t.ok());
        CHECK(t.status().code() == absl::StatusCode::kInvalidArgument);
        const std::string msg(t.status().message());
        CHECK_THAT(msg, Catch::Contains(dir.file("tokenizer.json")));
        CHECK_THAT(msg, Catch::Contains("\"" + std::string(c.field) + "\""));
    }
}

TEST_CASE("encode is thread-safe and gives the same ids on every thread", "[tokenizer]") {
    const Tokenizer& tok = tokenizer("qwen3_5");
    const auto& items = corpus();
    const int kThreads = 4;
    std::vector<size_t> bad(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            // Each thread starts elsewhere in the corpus so the word cache sees contention.
            for (size_t n = 0; n < items.size(); ++n) {
                const Item& it =
                    items[(n + static_cast<size_t>(t) * items.size() / kThreads) % items.size()];
                auto ids = tok.encode(it.text);
                if (!ids.ok() || *ids != it.expect["qwen3_5"]["ids"].get<std::vector<int32_t>>()) {
                    ++bad[static_cast<size_t>(t)];
                }
            }
        });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) CHECK(bad[static_cast<size_t>(t)] == 0);
}

}  // namespace deltatune
