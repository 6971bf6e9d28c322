// The deltatune command-line client. Subcommands that exist today run locally on the CPU
// reference path; the job commands (submit, list, ...) arrive with the daemon.
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "daemon/cli/commands.h"

namespace {

void usage(FILE* out) {
    std::fprintf(
        out,
        "usage: deltatune <command> [flags]\n"
        "  init-model --config CONFIG.json --out DIR [--seed N]   random-init HF checkpoint\n"
        "  step --model DIR --batch BATCH.json [--device cpu|cuda] [--grads-out F.safetensors]\n"
        "       [--update-out F.safetensors] [--recompute none|layer] [--lr X --beta1 X --beta2 X "
        "--eps X --weight-decay X]\n"
        "  bench --config CONFIG.json [--tokens 8192] [--steps 5] [--warmup 2] [--recompute "
        "layer|none]\n"
        "       [--seed 0] [--layers N] [--lr 1e-5]   training-step benchmark on a random model\n"
        "  kernels [--model DIR | --config CONFIG.json] [--strict] [--allow OP,...]\n"
        "       which implementation each op uses on this machine, and why\n"
        "  pack-stats --data FILE --tokens-per-batch N [--tokenizer T] [--window W] [--seed S]\n"
        "       [--chat-template qwen3|qwen3_5] [--world-size R] [--overlong split|truncate]\n"
        "       [--bad-lines fail|skip] [--cache-dir DIR]   packing efficiency vs 2D padding\n"
        "  tokenize --tokenizer DIR_OR_FILE [--chat] [--chat-template qwen3|qwen3_5] [--threads "
        "N]\n"
        "       < in.jsonl > out.jsonl   one {\"input_ids\"[, \"labels\"]} line per input line\n"
        "  train JOB.yaml [--rank R --world-size W --rendezvous DIR] [--data-shards N]\n"
        "       train in this process, without the daemon (W processes: data-parallel, Gloo)\n"
        "  submit JOB.yaml [--watch] | get JOB | list [--state S] [--label k=v] | watch JOB\n"
        "  cancel JOB | pause JOB | resume JOB | events JOB [--follow] | checkpoints JOB\n"
        "       job commands take [--address HOST:PORT] [--token-file F] [--output text|json] "
        "[--timeout S]\n");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const std::string command = argv[1];
    const std::vector<std::string> args(argv + 2, argv + argc);
    if (command == "init-model") return deltatune::cli::init_model_command(args);
    if (command == "step") return deltatune::cli::step_command(args);
    if (command == "bench") return deltatune::cli::bench_command(args);
    if (command == "kernels") return deltatune::cli::kernels_command(args);
    if (command == "pack-stats") return deltatune::cli::pack_stats_command(args);
    if (command == "tokenize") return deltatune::cli::tokenize_command(args);
    if (command == "train") return deltatune::cli::train_command(args);
    static const std::set<std::string> kJobCommands = {
        "submit", "get", "list", "watch", "cancel", "pause", "resume", "events", "checkpoints"};
    if (kJobCommands.count(command)) return deltatune::cli::job_command(command, args);
    std::fprintf(stderr, "deltatune: unknown command '%s'\n", command.c_str());
    usage(stderr);
    return 2;
}
