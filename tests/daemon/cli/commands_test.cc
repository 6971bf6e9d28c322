// daemon/cli/commands.h: each command's flags as declared, fed bad values without running the
// command (nothing here reaches a daemon, a model or a dataset).
#include "daemon/cli/commands.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace deltatune::cli {
namespace {

// What a command line gives a command: its one-line error ("" when it parses), and the command's
// --help.
struct Parsed {
    std::string error;
    std::string help;
};

Parsed parse(CommandRun (*declare)(CLI::App&), const std::string& line) {
    CLI::App app{"", "deltatune test"};
    daemon::configure_command_line(app);
    const CommandRun run = declare(app);  // owns what the flags are parsed into
    bool help = false;
    const absl::Status s =
        daemon::parse_command_line(app, absl::StrSplit(line, ' ', absl::SkipEmpty()), &help);
    return {s.ok() ? "" : std::string(s.message()), app.help()};
}

CommandRun get(CLI::App& app) {
    return one_job_command(app, "get");
}

TEST_CASE("local commands name the flag and the value they refuse", "[cli]") {
    CHECK(parse(step_command, "--model m --batch b --beta2 high").error ==
          "--beta2: 'high' is not a number");
    CHECK(parse(step_command, "--model m --batch b --recompute all").error ==
          "--recompute: expected none or layer, got 'all'");
    CHECK(parse(init_model_command, "--config c --out o --seed -3").error ==
          "--seed: '-3' is not a non-negative integer");
    CHECK(parse(init_model_command, "--config c --out o --device gpu").error ==
          "--device: expected host or cuda, got 'gpu'");
    CHECK(parse(pack_stats_command, "--data d --tokens-per-batch 8k").error ==
          "--tokens-per-batch: '8k' is not a non-negative integer");
    CHECK(parse(pack_stats_command, "--data d --tokens-per-batch 64 --format csv").error ==
          "--format: expected auto, chat or pretokenized, got 'csv'");
    CHECK(parse(pack_stats_command, "--data d --tokens-per-batch 64 --overlong cut").error ==
          "--overlong: expected split, truncate or drop, got 'cut'");
    CHECK(parse(pack_stats_command, "--data d --tokens-per-batch 64 --num-epochs two").error ==
          "--num-epochs: 'two' is not a number");
    CHECK(parse(pack_stats_command, "--data d").error ==
          "missing required flag --tokens-per-batch");
    CHECK(parse(tokenize_command, "--tokenizer t --threads -1").error ==
          "--threads: '-1' is not a non-negative integer");
    CHECK(parse(tokenize_command, "--tokenizer t --chat-template llama").error ==
          "--chat-template: expected qwen3 or qwen3_5, got 'llama'");
    CHECK(parse(train_command, "job.yaml --world-size 2 --rank -1").error ==
          "--rank: '-1' is not a non-negative integer");
    CHECK(parse(train_command, "job.yaml --device cuda:1").error ==
          "--device: 'cuda:1' is not a non-negative integer");
    CHECK(parse(train_command, "a.yaml b.yaml").error == "unexpected argument 'b.yaml'");
    CHECK(parse(kernels_command, "--strict yes").error == "unexpected argument 'yes'");
    CHECK(parse(bench_command, "--config c --recompute full").error ==
          "--recompute: expected layer, none or auto, got 'full'");
    CHECK(parse(bench_command, "--config c --tokens -5").error ==
          "--tokens: '-5' is not a non-negative integer");
    CHECK(parse(bench_command, "--config c --adapter dora").error ==
          "--adapter: expected lora, got 'dora'");
    CHECK(parse(bench_command, "--config c --lora-alpha x").error ==
          "--lora-alpha: 'x' is not a number");
    CHECK(parse(bench_command, "--steps 3").error == "missing required flag --config");
}

TEST_CASE("daemon commands take the client flags and check them before connecting", "[cli]") {
    CHECK(parse(agents_command, "--timeout soon").error == "--timeout: 'soon' is not a number");
    CHECK(parse(agents_command, "--output xml").error ==
          "--output: expected text, json or yaml, got 'xml'");
    CHECK(parse(list_command, "--page-size -5").error ==
          "--page-size: '-5' is not a non-negative integer");
    CHECK(parse(events_command, "jobs/x --since=-1").error ==
          "--since: '-1' is not a non-negative integer");
    CHECK(parse(events_command, "--follow").error == "expected one JOB");
    CHECK(parse(export_command, "jobs/x --step last").error ==
          "--step: 'last' is not a non-negative integer");
    CHECK(parse(profile_command, "jobs/x --wait 1.5").error ==
          "--wait: '1.5' is not a non-negative integer");
    CHECK(parse(submit_command, "a.yaml --watch --colour").error == "unknown flag --colour");
    CHECK(parse(get, "jobs/x --tls --ca-file").error == "flag --ca-file needs a value");
    // Every one of them lists the flags in its --help (agents once did not).
    for (auto declare :
         {agents_command, list_command, submit_command, events_command, checkpoints_command,
          export_command, profile_command, delete_command, get}) {
        const std::string help = parse(declare, "").help;
        for (const char* flag : {"--address HOST:PORT", "--token-file", "--tls", "--ca-file",
                                 "--output", "--timeout"}) {
            CHECK_THAT(help, Catch::Contains(flag));
        }
    }
}

TEST_CASE("pack-stats --help lists every flag it takes", "[cli]") {
    const std::string help = parse(pack_stats_command, "").help;
    for (const char* flag :
         {"--data", "--tokens-per-batch", "--tokenizer", "--chat-template", "--format",
          "--overlong", "--bad-lines", "--cache-dir", "--threads", "--vocab-size", "--window",
          "--seed", "--world-size", "--gradient-accumulation", "--num-epochs"}) {
        CHECK_THAT(help, Catch::Contains(flag));
    }
    CHECK_THAT(help, Catch::Contains("--format auto|chat|pretokenized=auto"));
}

}  // namespace
}  // namespace deltatune::cli
