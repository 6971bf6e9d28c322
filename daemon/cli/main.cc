// The deltatune command-line client: local commands (init-model, step, bench, kernels,
// pack-stats, tokenize, train) and the job commands that talk to deltatuned over gRPC.
// `deltatune --help` lists every command; `deltatune COMMAND --help` (or -h) prints that
// command's usage and exits 0; `deltatune --version` prints the version.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/cli/commands.h"

#ifndef DT_VERSION
#define DT_VERSION "unknown"
#endif

namespace {

using Run = int (*)(const std::vector<std::string>&);

struct Command {
    const char* name;
    const char* usage;    // after "deltatune NAME"
    Run run;              // null: a job command (job_command)
    bool client = false;  // talks to a daemon (every job command does): takes the client flags
};

constexpr char kJobFlags[] =
    "       job commands take [--address HOST:PORT] (or $DELTATUNE_ADDRESS) [--token-file F]\n"
    "       [--tls] [--ca-file PEM] (or $DELTATUNE_TLS=1, $DELTATUNE_CA_FILE)\n"
    "       [--output text|json|yaml] [--timeout S]: json is the proto3 JSON mapping of the\n"
    "       API's messages; yaml (get only) prints the job file that resubmits the job\n";

// clang-format off
const Command kCommands[] = {
    {"init-model", "--config CONFIG.json --out DIR [--seed N]\n"
                   "       random-init Hugging Face checkpoint", deltatune::cli::init_model_command},
    {"step", "--model DIR --batch BATCH.json [--device cpu|cuda] [--grads-out F.safetensors]\n"
             "       [--update-out F.safetensors] [--recompute none|layer] [--lr X --beta1 X --beta2 X\n"
             "       --eps X --weight-decay X] [--adapter PEFT_DIR]   one training step, printed as\n"
             "       one JSON line (with --adapter: a LoRA step on the frozen base, CPU)",
     deltatune::cli::step_command},
    {"bench", "--config CONFIG.json [--tokens 8192] [--steps 5] [--warmup 2]\n"
              "       [--recompute layer|none|auto] [--seed 0] [--layers N] [--lr 1e-5]\n"
              "       [--world-size N --rank R --rendezvous DIR] [--micro-batches K]\n"
              "       [--max-grad-norm X] [--timeout-ms MS] [--sample-out FILE]\n"
              "       [--adapter lora [--lora-rank R] [--lora-alpha A] [--lora-targets m,...]]\n"
              "       [--trace-out FILE]   training-step benchmark on a random model (the job's\n"
              "       GPU engine); --trace-out: the profiled step's timeline (Chrome trace JSON)",
     deltatune::cli::bench_command},
    {"kernels", "[--model DIR | --config CONFIG.json] [--strict] [--allow OP,...]\n"
                "       which implementation each op uses on this machine, and why",
     deltatune::cli::kernels_command},
    {"pack-stats", "--data FILE --tokens-per-batch N [--tokenizer T] [--window W] [--seed S]\n"
                   "       [--chat-template qwen3|qwen3_5] [--world-size R] [--overlong split|truncate|drop]\n"
                   "       [--format auto|chat|pretokenized] [--bad-lines fail|skip] [--cache-dir DIR]\n"
                   "       [--gradient-accumulation K] [--num-epochs E]\n"
                   "       packing efficiency vs 2D padding, the steps of one epoch and (--num-epochs)\n"
                   "       of the run; template and over-long policy default as a job's do",
     deltatune::cli::pack_stats_command},
    {"tokenize", "--tokenizer DIR_OR_FILE [--chat] [--chat-template qwen3|qwen3_5] [--threads N]\n"
                 "       < in.jsonl > out.jsonl   one {\"input_ids\"[, \"labels\"]} line per input line\n"
                 "       (the chat template defaults to the tokenizer's, as a job's does)",
     deltatune::cli::tokenize_command},
    {"train", "JOB.yaml [--rank R --world-size W --rendezvous DIR] [--data-shards N]\n"
              "       train in this process, without the daemon (W processes: data-parallel, Gloo)",
     deltatune::cli::train_command},
    {"submit", "JOB.yaml [--watch] [--validate-only] [--request-id ID]   submit a job", nullptr},
    {"get", "JOB   a job's state, progress and paths (--output yaml: its job file)", nullptr},
    {"list", "[--state S] [--label k=v ...] [--page-size N] [--page-token T]   jobs", nullptr},
    {"watch", "JOB   follow a job's progress until it ends", nullptr},
    {"cancel", "JOB   stop a job (ranks get SIGTERM, then SIGKILL)", nullptr},
    {"pause", "JOB   checkpoint and stop a job; resume continues it", nullptr},
    {"resume", "JOB   queue a paused (or failed) job again from its last checkpoint", nullptr},
    {"events", "JOB [--since N] [--follow]   a job's events (--follow: live, until it ends)",
     nullptr},
    {"checkpoints", "JOB   a job's checkpoints", nullptr},
    {"profile", "JOB [--steps 3] [--out FILE] [--wait 600]   trace a running GPU job's next steps\n"
                "       (CUPTI): a Chrome/Perfetto trace and where the GPU time went", nullptr},
    {"export", "JOB [--step N | --best] [--out DIR] [--merged]   a checkpoint as a Hugging Face\n"
               "       folder, written here (default: the newest, into OUTPUT_DIR/export-step-N;\n"
               "       --best: early stopping's best); a LoRA job's adapter as a PEFT folder, or\n"
               "       with --merged merged into the base", nullptr},
    {"delete", "JOB   remove a finished job from the daemon (its output folder stays)", nullptr},
    {"agents", "   the node agents registered with the daemon (jobs with resources.nodes run there)",
     deltatune::cli::agents_command, true},
};
// clang-format on

void print_usage(FILE* out, const Command& c) {
    std::fprintf(out, "usage: deltatune %s %s\n", c.name, c.usage);
    if (c.run == nullptr || c.client) std::fputs(kJobFlags, out);
}

void usage(FILE* out) {
    std::fprintf(out,
                 "usage: deltatune <command> [flags]   (deltatune <command> --help for one)\n");
    for (const Command& c : kCommands) std::fprintf(out, "  %s %s\n", c.name, c.usage);
    std::fputs(kJobFlags, out);
}

bool asks_for_help(const std::vector<std::string>& args) {
    for (const std::string& a : args) {
        if (a == "--help" || a == "-h") return true;
    }
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const std::string command = argv[1];
    if (command == "--help" || command == "-h" || command == "help") {
        usage(stdout);
        return 0;
    }
    if (command == "--version" || command == "-V") {
        std::printf("deltatune %s\n", DT_VERSION);
        return 0;
    }
    const std::vector<std::string> args(argv + 2, argv + argc);
    for (const Command& c : kCommands) {
        if (command != c.name) continue;
        if (asks_for_help(args)) {
            print_usage(stdout, c);
            return 0;
        }
        return c.run ? c.run(args) : deltatune::cli::job_command(command, args);
    }
    std::fprintf(stderr, "deltatune: unknown command '%s'\n", command.c_str());
    usage(stderr);
    return 2;
}
