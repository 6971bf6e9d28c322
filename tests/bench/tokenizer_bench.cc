// Encode throughput of the Tokenizer, to compare with scripts/tools/bench_tokenizer_reference.py
// (the Hugging Face library on the same corpus). Prints one JSON line.
//   tokenizer_bench CORPUS TOKENIZER_JSON [THREADS] [REPEAT]
// CORPUS: the fixture corpus.jsonl (its "text" fields) or plain text, one string per line.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/data/tokenizer.h"

namespace {

std::vector<std::string> read_corpus(const std::string& path) {
    std::vector<std::string> texts;
    std::ifstream in(path, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line[0] == '{') {
            texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
        } else {
            texts.push_back(line);
        }
    }
    return texts;
}

// Encodes every text `repeat` times over `threads` threads (text i on thread i % threads);
// returns seconds and the number of tokens produced.
std::pair<double, size_t> run(const deltatune::Tokenizer& tok,
                              const std::vector<std::string>& texts, int threads, int repeat) {
    std::vector<size_t> tokens(static_cast<size_t>(threads), 0);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            for (int r = 0; r < repeat; ++r) {
                for (size_t i = static_cast<size_t>(t); i < texts.size();
                     i += static_cast<size_t>(threads)) {
                    tokens[static_cast<size_t>(t)] += tok.encode(texts[i]).value().size();
                }
            }
        });
    }
    for (auto& th : pool) th.join();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    size_t total = 0;
    for (size_t n : tokens) total += n;
    return {s, total};
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s CORPUS TOKENIZER_JSON [THREADS] [REPEAT]\n", argv[0]);
        return 2;
    }
    const int threads =
        argc > 3 ? std::stoi(argv[3]) : static_cast<int>(std::thread::hardware_concurrency());
    const int repeat = argc > 4 ? std::stoi(argv[4]) : 3;
    const auto t0 = std::chrono::steady_clock::now();
    auto tok = deltatune::Tokenizer::load(argv[2]);
    if (!tok.ok()) {
        std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
        return 1;
    }
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::vector<std::string> texts = read_corpus(argv[1]);
    size_t bytes = 0;
    for (const auto& t : texts) bytes += t.size();
    run(**tok, texts, 1, 1);  // warm-up: fills the word cache, as the reference's warm-up does
    nlohmann::json out = {{"impl", "deltatune"}, {"tokenizer", argv[2]}, {"texts", texts.size()},
                          {"bytes", bytes},      {"repeat", repeat},     {"load_seconds", load_s}};
    for (int n : {1, threads}) {
        const auto [s, tokens] = run(**tok, texts, n, repeat);
        out[n == 1 ? "single" : "multi"] = {{"threads", n},
                                            {"seconds", s},
                                            {"mb_s", static_cast<double>(bytes) * repeat / 1e6 / s},
                                            {"tokens_s", static_cast<double>(tokens) / s}};
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
}
