// deltatune tokenize < in.jsonl > out.jsonl (or --input FILE). The chat template defaults to the
// one the tokenizer's folder carries, as a job's does (choose_chat_template).
// Reads JSON lines with "text" (or "messages" with --chat) and writes, in input order, one JSON
// line per input with "input_ids" (and "labels" with --chat); a blank input line gives a blank
// output line, so line N of the output is always line N's. Special tokens written in the text
// are recognised, as the Hugging Face library does by default. Lines are tokenized in chunks on
// all cores; the first bad line stops the run with "FILE:LINE: reason" and exit status 2.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/data/chat_template.h"
#include "runtime/data/chat_template_source.h"
#include "runtime/data/dataset.h"
#include "runtime/data/jsonl_reader.h"
#include "runtime/data/tokenizer.h"

namespace deltatune::cli {
namespace {

constexpr size_t kLinesPerChunk = 4096;

struct Job {
    const Tokenizer* tokenizer = nullptr;
    bool chat = false;
    ChatTemplateKind kind = ChatTemplateKind::kQwen35;
};

// One input line -> one output line, or an error message "reason: detail". A blank line gives a
// blank line, so that output line N always answers input line N.
absl::StatusOr<std::string> tokenize_line(const Job& job, std::string_view text) {
    if (text.find_first_not_of(" \t") == std::string_view::npos) return std::string();
    if (job.chat) {
        ChatConversation chat;
        if (auto e = parse_chat_line(text, chat)) {
            return absl::InvalidArgumentError(
                e->detail.empty() ? e->reason : absl::StrCat(e->reason, ": ", e->detail));
        }
        DT_ASSIGN_OR_RETURN(const Document doc, tokenize_chat(*job.tokenizer, chat, job.kind));
        return nlohmann::json{{"input_ids", doc.input_ids}, {"labels", doc.labels}}.dump();
    }
    nlohmann::json j;
    if (auto why = parse_json_line(text, j)) {
        return absl::InvalidArgumentError("not valid JSON: " + *why);
    }
    if (!j.is_object() || !j.contains("text"))
        return absl::InvalidArgumentError("missing \"text\"");
    if (!j["text"].is_string()) return absl::InvalidArgumentError("\"text\" is not a string");
    DT_ASSIGN_OR_RETURN(const std::vector<int32_t> ids,
                        job.tokenizer->encode(j["text"].get_ref<const std::string&>()));
    return nlohmann::json{{"input_ids", ids}}.dump();
}

// Tokenizes one chunk on `threads` threads; results keep input order.
std::vector<absl::StatusOr<std::string>> run_chunk(const Job& job,
                                                   const std::vector<std::string>& lines,
                                                   int threads) {
    std::vector<absl::StatusOr<std::string>> out(lines.size(), std::string());
    const size_t n = lines.size();
    const size_t workers = std::min<size_t>(static_cast<size_t>(threads), n);
    std::vector<std::thread> pool;
    for (size_t w = 0; w < workers; ++w) {
        pool.emplace_back([&, w] {
            for (size_t i = w; i < n; i += workers) out[i] = tokenize_line(job, lines[i]);
        });
    }
    for (auto& t : pool) t.join();
    return out;
}

struct TokenizeFlags {
    std::string tokenizer, chat_template, input;
    bool chat = false;
    uint64_t threads = 0;
};

absl::Status tokenize(const TokenizeFlags& flags) {
    DT_ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer,
                        Tokenizer::load(flags.tokenizer));
    Job job{tokenizer.get(), flags.chat, ChatTemplateKind::kQwen35};
    DT_ASSIGN_OR_RETURN(job.kind,
                        chat_template_for(*tokenizer, flags.tokenizer, flags.chat_template));
    uint64_t threads = flags.threads;
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    const std::string input = flags.input.empty() ? "/dev/stdin" : flags.input;
    const std::string shown = flags.input.empty() ? "<stdin>" : input;
    DT_ASSIGN_OR_RETURN(JsonlReader reader, JsonlReader::open(input));
    std::vector<std::string> lines;
    std::vector<int64_t> numbers;
    auto flush = [&]() -> absl::Status {
        const auto results = run_chunk(job, lines, static_cast<int>(threads));
        for (size_t i = 0; i < results.size(); ++i) {
            if (!results[i].ok()) {
                return absl::InvalidArgumentError(
                    absl::StrCat(shown, ":", numbers[i], ": ", results[i].status().message()));
            }
            std::fwrite(results[i]->data(), 1, results[i]->size(), stdout);
            std::fputc('\n', stdout);
        }
        if (std::ferror(stdout)) return absl::DataLossError("writing stdout failed");
        lines.clear();
        numbers.clear();
        return absl::OkStatus();
    };
    JsonlReader::Line line;
    while (true) {
        DT_ASSIGN_OR_RETURN(const bool more, reader.next(line));
        if (!more) break;
        if (line.too_long) {
            return absl::InvalidArgumentError(
                absl::StrCat(shown, ":", line.number, ": line too long"));
        }
        lines.emplace_back(line.text);
        numbers.push_back(line.number);
        if (lines.size() == kLinesPerChunk) DT_RETURN_IF_ERROR(flush());
    }
    DT_RETURN_IF_ERROR(flush());
    std::fflush(stdout);
    return absl::OkStatus();
}

}  // namespace

CommandRun tokenize_command(CLI::App& app) {
    auto f = std::make_shared<TokenizeFlags>();
    app.add_option("--tokenizer", f->tokenizer, "tokenizer.json, or the folder holding it")
        ->required()
        ->type_name("DIR_OR_FILE");
    app.add_flag("--chat", f->chat, "lines are conversations (\"messages\"): ids and labels");
    daemon::one_of(app.add_option("--chat-template", f->chat_template,
                                  "default: the one the tokenizer's folder carries, as a job's"),
                   {"qwen3", "qwen3_5"});
    daemon::add_count(app, "--threads", f->threads, "0: every core");
    app.add_option("--input", f->input, "read this instead of stdin")->type_name("FILE");
    return [f] {
        const absl::Status s = tokenize(*f);
        return s.ok() ? 0 : fail("tokenize", s);
    };
}

}  // namespace deltatune::cli
