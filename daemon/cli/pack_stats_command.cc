// deltatune pack-stats --data FILE [--tokenizer T] --tokens-per-batch N [--window W] [--seed S]
//     [--chat-template qwen3|qwen3_5 (default: the tokenizer's, as a job picks)]
//     [--format auto|chat|pretokenized] [--world-size R]
//     [--overlong split|truncate|drop (default: as a job's, truncate for conversations)]
//     [--bad-lines fail|skip] [--cache-dir DIR] [--threads N]
//     [--gradient-accumulation K] [--num-epochs E]
//     [--vocab-size V]   (ids are checked against V, default the tokenizer's vocabulary if given)
// Loads (and tokenizes) a dataset, plans one epoch of packing and prints one JSON line: documents,
// tokens, batches, steps (the optimizer steps of one epoch, as a job with these settings runs
// them; with --num-epochs also max_steps, the job's), packing efficiency (real tokens / (batches x
// N)), the batches 2D padding would need over the same shuffled order, the relative reduction, and
// the ranks' token balance.
#include <cstdio>
#include <memory>

#include "daemon/cli/commands.h"
#include "daemon/cli/flags.h"
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

// --overlong, else what a job's spec gets for this file: truncate for conversations.
absl::StatusOr<std::string> default_overlong_name(const Flags& flags, const std::string& path) {
    if (flags.has("overlong")) return flags.get("overlong");
    v1::DataSpec spec;
    spec.set_bad_lines(v1::BAD_LINE_POLICY_SKIP);  // load_dataset reports bad lines itself
    DT_ASSIGN_OR_RETURN(const daemon::DataKind kind, daemon::check_data_file("--data", path, spec));
    return std::string(daemon::default_overlong({kind}) == v1::OVERLONG_POLICY_TRUNCATE ? "truncate"
                                                                                        : "split");
}

absl::StatusOr<nlohmann::json> pack_stats(const Flags& flags) {
    DT_ASSIGN_OR_RETURN(const std::string data_path, flags.require("data"));
    DT_ASSIGN_OR_RETURN(const uint64_t tokens_per_batch, flags.get_uint("tokens-per-batch", 0));
    if (!flags.has("tokens-per-batch") || tokens_per_batch == 0) {
        return absl::InvalidArgumentError("--tokens-per-batch must be a positive integer");
    }
    DatasetOptions dopt;
    DT_ASSIGN_OR_RETURN(dopt.format, parse_dataset_format(flags.get("format", "auto")));
    DT_ASSIGN_OR_RETURN(dopt.bad_lines, parse_bad_line_policy(flags.get("bad-lines", "fail")));
    DT_ASSIGN_OR_RETURN(const uint64_t threads, flags.get_uint("threads", 0));
    dopt.num_threads = static_cast<int>(threads);
    dopt.cache_dir = flags.get("cache-dir");
    std::unique_ptr<Tokenizer> tokenizer;
    if (flags.has("tokenizer")) {
        DT_ASSIGN_OR_RETURN(tokenizer, Tokenizer::load(flags.get("tokenizer")));
        DT_ASSIGN_OR_RETURN(
            const ChatTemplateKind kind,
            chat_template_for(*tokenizer, flags.get("tokenizer"), flags.get("chat-template")));
        dopt.chat = make_chat_tokenizer(*tokenizer, kind);
        dopt.vocab_size = tokenizer->vocab_size();
    }
    DT_ASSIGN_OR_RETURN(const uint64_t vocab, flags.get_uint("vocab-size", 0));
    if (vocab) dopt.vocab_size = static_cast<int64_t>(vocab);
    DT_ASSIGN_OR_RETURN(const TokenizedDataset data, load_dataset(data_path, dopt));

    PackingOptions popt;
    popt.tokens_per_batch = static_cast<int64_t>(tokens_per_batch);
    DT_ASSIGN_OR_RETURN(const uint64_t window, flags.get_uint("window", popt.window));
    DT_ASSIGN_OR_RETURN(popt.seed, flags.get_uint("seed", 0));
    DT_ASSIGN_OR_RETURN(const uint64_t world, flags.get_uint("world-size", 1));
    DT_ASSIGN_OR_RETURN(const std::string overlong, default_overlong_name(flags, data_path));
    DT_ASSIGN_OR_RETURN(popt.overlong, parse_overlong_policy(overlong));
    popt.window = static_cast<int64_t>(window);
    popt.world_size = static_cast<int>(world);
    DT_ASSIGN_OR_RETURN(const Packer packer, Packer::create(data.lengths(), popt));
    const PackingStats& s = packer.epoch_stats();
    DT_ASSIGN_OR_RETURN(const uint64_t accum, flags.get_uint("gradient-accumulation", 1));
    DT_ASSIGN_OR_RETURN(const double epochs, flags.get_double("num-epochs", 0));
    if (accum == 0) return absl::InvalidArgumentError("--gradient-accumulation must be >= 1");
    const bool by_epochs = flags.has("num-epochs");
    DT_ASSIGN_OR_RETURN(const TrainingLength length,
                        training_length({by_epochs ? 0 : 1, by_epochs ? epochs : 0, 0, 0}, s.steps,
                                        static_cast<int64_t>(accum)));
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

}  // namespace

int pack_stats_command(const std::vector<std::string>& args) {
    auto flags = Flags::parse(
        args, {"data", "tokenizer", "tokens-per-batch", "window", "seed", "chat-template", "format",
               "world-size", "overlong", "bad-lines", "cache-dir", "threads", "vocab-size",
               "gradient-accumulation", "num-epochs"});
    absl::StatusOr<nlohmann::json> out =
        flags.ok() ? pack_stats(*flags) : absl::StatusOr<nlohmann::json>(flags.status());
    if (!out.ok()) {
        return fail("pack-stats", out.status());
    }
    std::printf("%s\n", out->dump().c_str());
    return 0;
}

}  // namespace deltatune::cli
