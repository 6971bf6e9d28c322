// The deltatune CLI contract: init-model and step
// end to end through the real binary, one JSON line on success, one clear error line and a
// non-zero exit on bad input.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_split.h"
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

TEST_CASE("bad command lines fail with one clear line and the exit status of their kind", "[cli]") {
    const std::string fixture = testing::source_path("tests/fixtures/parity/tiny-a");
    std::string out;
    // 2: a bad command line; 3: a file that cannot be opened (the README's table).
    CHECK(run("step --batch x.json", out) == 2);
    CHECK(out == "deltatune step: missing required flag --model\n");
    CHECK(run("step --model " + fixture + " --batch " + fixture + "/batch.json --lr fast", out) ==
          2);
    CHECK(out == "deltatune step: --lr: 'fast' is not a number\n");
    CHECK(run("step --model " + fixture + " --batch " + fixture + "/batch.json --device tpu",
              out) == 2);
    CHECK(out == "deltatune step: --device: expected cpu or cuda, got 'tpu'\n");
    CHECK(run("step --model " + fixture + " --batch /nonexistent.json", out) == 3);
    CHECK(out.find("/nonexistent.json: cannot open") != std::string::npos);
    CHECK(run("step --model /nonexistent --batch x.json", out) == 3);
    CHECK(out.find("/nonexistent/config.json: cannot open") != std::string::npos);
    CHECK(run("init-model --config x.json --out y --colour blue", out) == 2);
    CHECK(out == "deltatune init-model: unknown flag --colour\n");
    CHECK(run("bench --config x.json --max-grad-norm -1", out) == 2);
    CHECK(out == "deltatune bench: --max-grad-norm must be >= 0 (0: no clipping), got -1\n");
    CHECK(run("bench --config x.json --world-size 2 --rank 1", out) == 2);
    CHECK(out == "deltatune bench: --world-size > 1 needs --rendezvous DIR\n");
    CHECK(run("bench --config x.json --trace-out t.json --world-size 2 --rank 1", out) == 2);
    CHECK(out == "deltatune bench: --world-size > 1 needs --rendezvous DIR\n");  // a known flag
    CHECK(run("frobnicate", out) == 2);
    CHECK(run("kernels --config /nonexistent.json", out) == 3);
    CHECK(run("pack-stats --data /nonexistent.jsonl --tokens-per-batch 64", out) == 3);
    CHECK(run("train /nonexistent.yaml", out) == 3);
    CHECK(out == "deltatune train: /nonexistent.yaml: cannot open\n");
}

TEST_CASE("kernels lists the ops and the projections FP8 would cover", "[cli]") {
    std::string out;
    REQUIRE(run("kernels --config " + testing::source_path("configs/models/qwen3.8-27b.json"),
                out) == 0);
    INFO(out);
    CHECK(out.find("linear") != std::string::npos);
    // This machine's answer: every large projection on a Hopper GPU, none elsewhere.
    const bool listed =
        out.find(
            "fp8 projections (precision.projections: fp8): q_proj k_proj v_proj o_proj "
            "gate_proj up_proj down_proj in_proj_qkv in_proj_z out_proj\n") != std::string::npos;
    const bool none =
        out.find("fp8 projections: none here (Hopper GPUs only)\n") != std::string::npos;
    CHECK(listed != none);
}

std::string tokenizer_fixtures() {
    return testing::tree_dir("DELTATUNE_BINARY_DIR", DT_BINARY_DIR) + "/fixtures/tokenizer";
}

TEST_CASE("tokenize writes the library's ids for every corpus line, in order", "[cli]") {
    const std::string dir = tokenizer_fixtures();
    std::string out;
    REQUIRE(
        run("tokenize --tokenizer " + dir + "/qwen3 --threads 2 --input " + dir + "/corpus.jsonl",
            out) == 0);
    std::ifstream corpus(dir + "/corpus.jsonl");
    std::istringstream lines(out);
    size_t n = 0, bad = 0;
    for (std::string want, got; std::getline(corpus, want);) {
        REQUIRE(std::getline(lines, got));
        const auto expected = nlohmann::json::parse(want)["qwen3"]["ids"];
        bad += nlohmann::json::parse(got)["input_ids"] != expected;
        ++n;
    }
    CHECK(n >= 2000);
    CHECK(bad == 0);
}

// TMP/chat.jsonl holding one short conversation.
std::string one_conversation(const TempDir& tmp) {
    const std::string path = tmp.file("chat.jsonl");
    std::ofstream(path) << R"({"messages": [{"role": "user", "content": "2+2?"},)"
                        << R"( {"role": "assistant", "content": "4"}]})"
                        << "\n";
    return path;
}

TEST_CASE("tokenize --chat masks all but the assistant turns; bad lines name file and line",
          "[cli]") {
    TempDir tmp;
    const std::string in = one_conversation(tmp);
    std::string out;
    REQUIRE(run("tokenize --chat --chat-template qwen3 --tokenizer " + tokenizer_fixtures() +
                    "/qwen3/tokenizer.json --input " + in,
                out) == 0);
    const auto j = nlohmann::json::parse(out);
    const auto ids = j["input_ids"].get<std::vector<int>>();
    const auto labels = j["labels"].get<std::vector<int>>();
    REQUIRE(ids.size() == labels.size());
    size_t trained = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (labels[i] != -100) {
            CHECK(labels[i] == ids[i]);
            ++trained;
        }
    }
    // "4" + "<|im_end|>" (Qwen3's template adds an empty think block to the last turn).
    CHECK(trained >= 2);
    CHECK(trained < ids.size() / 2);
    CHECK(labels.back() == -100);  // the "\n" after <|im_end|> is not trained

    std::ofstream(in) << R"({"text": "ok"})"
                      << "\n"
                      << "{not json\n";
    CHECK(run("tokenize --tokenizer " + tokenizer_fixtures() + "/qwen3 --input " + in, out) == 2);
    // Lines before the bad one are written (stdout); the error names file and line (stderr).
    CHECK(out.find("deltatune tokenize: " + in +
                   ":2: not valid JSON: parse error at line 1, column 3: syntax error while "
                   "parsing object key - invalid literal; last read: '{no'; expected string "
                   "literal\n") != std::string::npos);
    CHECK(out.find("{\"input_ids\":[") != std::string::npos);
}

TEST_CASE("tokenize and pack-stats render chat with the tokenizer's template, as a job does",
          "[cli]") {
    TempDir tmp;
    const std::string in = one_conversation(tmp);
    // Each tokenizer's default equals its own template named, and the two differ.
    std::map<std::string, std::string> rendered;
    for (const std::string tok : {"qwen3", "qwen3_5"}) {
        const std::string base = "tokenize --chat --tokenizer " + tokenizer_fixtures() + "/" + tok +
                                 "/tokenizer.json --input " + in;
        std::string by_default, named;
        REQUIRE(run(base, by_default) == 0);
        REQUIRE(run(base + " --chat-template " + tok, named) == 0);
        CHECK(by_default == named);
        rendered[tok] = by_default;
    }
    CHECK(rendered["qwen3"] != rendered["qwen3_5"]);
    // pack-stats counts the tokens the qwen3 template gives, not qwen3_5's.
    std::string stats;
    REQUIRE(run("pack-stats --format chat --tokens-per-batch 64 --tokenizer " +
                    tokenizer_fixtures() + "/qwen3/tokenizer.json --data " + in,
                stats) == 0);
    const auto ids = nlohmann::json::parse(rendered["qwen3"])["input_ids"];
    CHECK(nlohmann::json::parse(stats)["tokens"].get<size_t>() == ids.size());
    CHECK(nlohmann::json::parse(stats)["steps"].get<int>() == 1);
}

TEST_CASE("tokenize answers every input line, blank ones with a blank line; NUL is refused",
          "[cli]") {
    TempDir tmp;
    const std::string in = tmp.file("text.jsonl");
    std::ofstream(in) << "{\"text\": \"a\"}\n\n  \n{\"text\": \"b\"}\n";
    std::string out;
    REQUIRE(run("tokenize --tokenizer " + tokenizer_fixtures() + "/qwen3 --input " + in, out) == 0);
    const std::vector<std::string> lines = absl::StrSplit(out, '\n');
    REQUIRE(lines.size() == 5);  // four lines and the final newline
    CHECK(lines[0].starts_with("{\"input_ids\":["));
    CHECK(lines[1].empty());
    CHECK(lines[2].empty());
    CHECK(lines[3].starts_with("{\"input_ids\":["));
    // A NUL would end the parse early and pass the text before it as the whole line.
    std::ofstream(in, std::ios::binary) << std::string("{\"text\": \"a\"}\0junk\n", 19);
    CHECK(run("tokenize --tokenizer " + tokenizer_fixtures() + "/qwen3 --input " + in, out) == 2);
    CHECK(out.find(in + ":1: not valid JSON: NUL byte at column 14\n") != std::string::npos);
}

TEST_CASE("token files and DELTATUNE_TOKEN are read as the daemon reads them", "[cli]") {
    TempDir tmp;
    std::string out;
    // CR LF endings and a comment line: the first token, trimmed, and no abort (the CLI once
    // died on signal 6 putting the CR into a header). Nothing listens on port 1: UNAVAILABLE.
    std::ofstream(tmp.file("tokens")) << "# ops team\r\n  tok-123  \r\n";
    const std::string list = "list --address 127.0.0.1:1 --timeout 1 ";
    CHECK(run(list + "--token-file " + tmp.file("tokens"), out) == 4);  // daemon unreachable
    CHECK_THAT(out, Catch::Contains("UNAVAILABLE") || Catch::Contains("unavailable") ||
                        Catch::Contains("failed to connect"));
    CHECK(testing::run_command("DELTATUNE_TOKEN=\"$(printf 'tok-123\\r\\n')\" " +
                                   testing::cli_path() + " " + list + " 2>&1",
                               out) == 4);
    CHECK_THAT(out, !Catch::Contains("header"));
    std::ofstream(tmp.file("bad")) << "tok 123\n";
    CHECK(run(list + "--token-file " + tmp.file("bad"), out) == 2);
    CHECK_THAT(out, Catch::Contains("cannot travel in a header (byte 32)"));
    std::ofstream(tmp.file("empty")) << "# nothing\n\n";
    CHECK(run(list + "--token-file " + tmp.file("empty"), out) == 2);
    CHECK_THAT(out, Catch::Contains("holds no token"));
}

TEST_CASE("every command answers --help and -h with its usage, exit 0", "[cli]") {
    std::string out;
    for (const char* command : {"init-model", "step", "bench", "kernels", "pack-stats", "tokenize",
                                "train", "submit", "get", "list", "watch", "cancel", "pause",
                                "resume", "events", "checkpoints", "profile"}) {
        INFO(command);
        CHECK(run(std::string(command) + " --help", out) == 0);
        CHECK_THAT(out, Catch::StartsWith(std::string("usage: deltatune ") + command + " "));
        CHECK(run(std::string(command) + " -h", out) == 0);  // never a job named "-h"
        CHECK_THAT(out, Catch::StartsWith(std::string("usage: deltatune ") + command + " "));
    }
    CHECK(run("get jobs/x --output json -h", out) == 0);
    CHECK_THAT(out, Catch::Contains("--address HOST:PORT"));
    CHECK(run("agents --help", out) == 0);  // not a job command, but a client of the daemon
    CHECK_THAT(out, Catch::Contains("--address HOST:PORT"));
    CHECK(run("--help", out) == 0);
    CHECK_THAT(out, Catch::Contains("\n  checkpoints  a job's checkpoints\n"));
    CHECK(run("", out) == 2);  // no command: usage on stderr, a usage error
    CHECK(run("--version", out) == 0);
    CHECK_THAT(out, Catch::Matches("deltatune [0-9]+\\.[0-9]+\\.[0-9]+\n"));
    const std::string daemon =
        (std::filesystem::path(testing::cli_path()).parent_path() / "deltatuned").string();
    CHECK(testing::run_command(daemon + " --version 2>&1", out) == 0);
    CHECK_THAT(out, Catch::Matches("deltatuned [0-9]+\\.[0-9]+\\.[0-9]+\n"));
    CHECK(testing::run_command(daemon + " --help 2>&1", out) == 0);
    CHECK_THAT(out, Catch::StartsWith("usage: deltatuned [OPTIONS]"));
    CHECK_THAT(out, Catch::Contains("--config FILE REQUIRED"));
    // The agent and rank modes alike: asked for, on stdout with 0; a bad line, on stderr with 2.
    for (const std::string mode : {"agent", "rank"}) {
        CHECK(testing::run_command(daemon + " " + mode + " --help 2>/dev/null", out) == 0);
        CHECK_THAT(out, Catch::StartsWith("usage: deltatuned " + mode));
        CHECK(testing::run_command(daemon + " " + mode + " --bogus 2>/dev/null", out) == 2);
        CHECK(out.empty());
    }
}

TEST_CASE("deltatuned and its agent and rank modes name the flag and value they refuse", "[cli]") {
    const std::string daemon =
        (std::filesystem::path(testing::cli_path()).parent_path() / "deltatuned").string();
    const auto run_daemon = [&](const std::string& args, std::string& out) {
        return testing::run_command(daemon + " " + args + " 2>&1", out);
    };
    std::string out;
    CHECK(run_daemon("", out) == 2);
    CHECK(out == "deltatuned: missing required flag --config\n");
    CHECK(run_daemon("--config", out) == 2);
    CHECK(out == "deltatuned: flag --config needs a value\n");
    CHECK(run_daemon("--config d.yaml --listne 127.0.0.1:1", out) == 2);
    CHECK(out == "deltatuned: unknown flag --listne\n");
    const std::string agent = "agent --supervisor 127.0.0.1:1 ";
    CHECK(run_daemon(agent + "--cpu-ranks -1", out) == 2);
    CHECK(out == "deltatuned agent: --cpu-ranks: '-1' is not a non-negative integer\n");
    CHECK(run_daemon(agent + "--drain-seconds 90s", out) == 2);
    CHECK(out == "deltatuned agent: --drain-seconds: '90s' is not a non-negative integer\n");
    CHECK(run_daemon(agent + "--plaintext-token yes", out) == 2);
    CHECK(out == "deltatuned agent: --plaintext-token: expected allow, got 'yes'\n");
    CHECK(run_daemon("agent --cpu-ranks 2", out) == 2);
    CHECK(out == "deltatuned agent: missing required flag --supervisor\n");
    CHECK(run_daemon("rank --supervisor unix:/x --job jobs/a --spec s --world two", out) == 2);
    CHECK(out == "deltatuned rank: --world: 'two' is not a non-negative integer\n");
}

}  // namespace
}  // namespace deltatune
