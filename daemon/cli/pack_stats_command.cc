// deltatune pack-stats: loads (and tokenizes) a dataset, plans one epoch of packing and prints
// one JSON line: documents, tokens, batches, steps (the optimizer steps of one epoch, as a job
// with these settings runs them; with --num-epochs also max_steps, the job's), packing efficiency
// (real tokens / (batches x N)), the batches 2D padding would need over the same shuffled order,
// the relative reduction, and the ranks' token balance.
#include <cstdio>
#include <memory>
#include <optional>

#include "daemon/cli/commands.h"
#include "daemon/cli/job_client.h"
#include "daemon/config/data_check.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/data/chat_template_source.h"
#include "runtime/data/dataset.h"
#include "runtime/data/packing.h"
#include "runtime/data/tokenizer.h"
#include "runtime/train/training_length.h"

namespace deltatune::cli {
namespace {

struct PackStatsFlags {
    std::string data, tokenizer, chat_template, format = "auto", overlong, bad_lines = "fail",
                                                cache_dir;
    uint64_t tokens_per_batch = 0, window = PackingOptions().window, seed = 0, world_size = 1,
             threads = 0, vocab_size = 0, gradient_accumulation = 1;
    std::optional<double> num_epochs;
};

// --overlong, else what a job's spec gets for this file: truncate for conversations.
absl::StatusOr<std::string> default_overlong_name(const PackStatsFlags& flags) {
    if (!flags.overlong.empty()) return flags.overlong;
    v1::DataSpec spec;
    spec.set_bad_lines(v1::BAD_LINE_POLICY_SKIP);  // load_dataset reports bad lines itself
    DT_ASSIGN_OR_RETURN(const daemon::DataKind kind,
                        daemon::check_data_file("--data", flags.data, spec));
    return std::string(daemon::default_overlong({kind}) == v1::OVERLONG_POLICY_TRUNCATE ? "truncate"
                                                                                        : "split");
}

absl::StatusOr<nlohmann::json> pack_stats(const PackStatsFlags& flags) {
    if (flags.tokens_per_batch == 0) {
        return absl::InvalidArgumentError("--tokens-per-batch must be a positive integer");
    }
    DatasetOptions dopt;
    DT_ASSIGN_OR_RETURN(dopt.format, parse_dataset_format(flags.format));
    DT_ASSIGN_OR_RETURN(dopt.bad_lines, parse_bad_line_policy(flags.bad_lines));
    dopt.num_threads = static_cast<int>(flags.threads);
    dopt.cache_dir = flags.cache_dir;
    std::unique_ptr<Tokenizer> tokenizer;
    if (!flags.tokenizer.empty()) {
        DT_ASSIGN_OR_RETURN(tokenizer, Tokenizer::load(flags.tokenizer));
        DT_ASSIGN_OR_RETURN(const ChatTemplateKind kind,
                            chat_template_for(*tokenizer, flags.tokenizer, flags.chat_template));
        dopt.chat = make_chat_tokenizer(*tokenizer, kind);
        dopt.vocab_size = tokenizer->vocab_size();
    }
    if (flags.vocab_size) dopt.vocab_size = static_cast<int64_t>(flags.vocab_size);
    DT_ASSIGN_OR_RETURN(const TokenizedDataset data, load_dataset(flags.data, dopt));

    PackingOptions popt;
    popt.tokens_per_batch = static_cast<int64_t>(flags.tokens_per_batch);
    popt.seed = flags.seed;
    DT_ASSIGN_OR_RETURN(const std::string overlong, default_overlong_name(flags));
    DT_ASSIGN_OR_RETURN(popt.overlong, parse_overlong_policy(overlong));
    popt.window = static_cast<int64_t>(flags.window);
    popt.world_size = static_cast<int>(flags.world_size);
    DT_ASSIGN_OR_RETURN(const Packer packer, Packer::create(data.lengths(), popt));
    const PackingStats& s = packer.epoch_stats();
    if (flags.gradient_accumulation == 0) {
        return absl::InvalidArgumentError("--gradient-accumulation must be >= 1");
    }
    const bool by_epochs = flags.num_epochs.has_value();
    DT_ASSIGN_OR_RETURN(
        const TrainingLength length,
        training_length({by_epochs ? 0 : 1, by_epochs ? *flags.num_epochs : 0, 0, 0}, s.steps,
                        static_cast<int64_t>(flags.gradient_accumulation)));
    const double reduction =
        s.padded_2d_batches
            ? 1.0 - static_cast<double>(s.batches) / static_cast<double>(s.padded_2d_batches)
            : 0.0;
    return nlohmann::json{{"documents", s.documents},
                          {"segments", s.segments},
                          {"tokens", s.tokens},
                          {"overlong", overlong_policy_name(popt.overlong)},
                          {"overlong_documents", s.overlong_documents},
                          {"truncated_tokens", s.truncated_tokens},
                          {"dropped_tokens", s.dropped_tokens},
                          {"tokens_per_batch", popt.tokens_per_batch},
                          {"window", popt.window},
                          {"seed", popt.seed},
                          {"world_size", popt.world_size},
                          {"batches", s.batches},
                          {"steps", length.steps_per_epoch},
                          {"max_steps", by_epochs ? nlohmann::json(length.max_steps) : nullptr},
                          {"empty_batches", s.empty_batches},
                          {"efficiency", s.efficiency},
                          {"padded_2d_batches", s.padded_2d_batches},
                          {"batch_reduction_vs_2d", reduction},
                          {"rank_balance_worst", s.rank_balance_worst},
                          {"rank_balance_mean", s.rank_balance_mean},
                          {"lines", data.counts().lines},
                          {"skipped_lines", data.counts().skipped},
                          {"skipped_by_reason", data.counts().by_reason},
                          {"cache", data.from_cache() ? data.cache_path() : ""}};
}

int print_pack_stats(const PackStatsFlags& flags) {
    const absl::StatusOr<nlohmann::json> out = pack_stats(flags);
    if (!out.ok()) return fail("pack-stats", out.status());
    std::printf("%s\n", out->dump().c_str());
    return 0;
}

}  // namespace

CommandRun pack_stats_command(CLI::App& app) {
    auto f = std::make_shared<PackStatsFlags>();
    app.add_option("--data", f->data, "the dataset (JSON lines)")->required()->type_name("FILE");
    daemon::add_count(app, "--tokens-per-batch", f->tokens_per_batch, "tokens of one packed batch")
        ->required()
        ->default_str("");
    app.add_option("--tokenizer", f->tokenizer, "tokenize text and conversations with this")
        ->type_name("DIR_OR_FILE");
    daemon::one_of(app.add_option("--chat-template", f->chat_template,
                                  "default: the tokenizer's, as a job picks it"),
                   {"qwen3", "qwen3_5"});
    daemon::one_of(app.add_option("--format", f->format, "how the lines are read"),
                   {"auto", "chat", "pretokenized"});
    daemon::one_of(
        app.add_option(
            "--overlong", f->overlong,
            "documents longer than a batch (default: a job's, truncate for conversations)"),
        {"split", "truncate", "drop"});
    daemon::one_of(
        app.add_option("--bad-lines", f->bad_lines, "a line that does not parse: stop, or skip it"),
        {"fail", "skip"});
    app.add_option("--cache-dir", f->cache_dir, "keep the tokenized dataset here")
        ->type_name("DIR");
    daemon::add_count(app, "--threads", f->threads, "tokenizer threads (0: every core)");
    daemon::add_count(app, "--vocab-size", f->vocab_size,
                      "check ids against V (default: the tokenizer's)");
    daemon::add_count(app, "--window", f->window, "documents the packer looks ahead");
    daemon::add_count(app, "--seed", f->seed, "the shuffle's seed");
    daemon::add_count(app, "--world-size", f->world_size, "ranks the batches are dealt to");
    daemon::add_count(app, "--gradient-accumulation", f->gradient_accumulation,
                      "batches per optimizer step");
    app.add_option_function<double>(
           "--num-epochs", [f](const double& e) { f->num_epochs = e; },
           "also the steps of a run of E epochs (max_steps)")
        ->check(daemon::number())
        ->type_name("E");
    return [f] { return print_pack_stats(*f); };
}

}  // namespace deltatune::cli
