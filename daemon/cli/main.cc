// The deltatune command-line client: local commands (init-model, step, bench, kernels,
// pack-stats, tokenize, train) and the commands that talk to deltatuned over gRPC.
// `deltatune --help` lists every command; `deltatune COMMAND --help` (or -h) prints that
// command's usage, generated from its flag declarations (commands.h), and exits 0;
// `deltatune --version` prints the version.
#include <cstdio>
#include <string>
#include <vector>

#include "daemon/cli/commands.h"

#ifndef DT_VERSION
#define DT_VERSION "unknown"
#endif

namespace {

using deltatune::cli::CommandRun;
namespace cli = deltatune::cli;

struct Command {
    const char* name;
    const char* summary;  // the first line of its --help too
    CommandRun (*declare)(CLI::App& app);
    bool daemon = false;  // talks to deltatuned: listed with the connection flags
};

const Command kCommands[] = {
    {"init-model", "a random-initialised Hugging Face checkpoint of a model config",
     cli::init_model_command},
    {"step",
     "one training step, printed as one JSON line (with --adapter: a LoRA step on the\n"
     "frozen base, CPU)",
     cli::step_command},
    {"bench", "the training-step benchmark on a random model (the job's GPU engine)",
     cli::bench_command},
    {"kernels", "which implementation each op uses on this machine, and why", cli::kernels_command},
    {"pack-stats",
     "packing efficiency vs 2D padding, the steps of one epoch and (--num-epochs) of\n"
     "the run; template and over-long policy default as a job's do",
     cli::pack_stats_command},
    {"tokenize", "one {\"input_ids\"[, \"labels\"]} line per input line, stdin to stdout",
     cli::tokenize_command},
    {"train",
     "train a job file in this process, without the daemon (W processes:\n"
     "data-parallel, Gloo)",
     cli::train_command},
    {"submit", "submit a job", cli::submit_command, true},
    {"get", "a job's state, progress and paths (--output yaml: its job file)",
     [](CLI::App& a) { return cli::one_job_command(a, "get"); }, true},
    {"list", "jobs, by state or labels, a page at a time", cli::list_command, true},
    {"watch", "follow a job's progress until it ends",
     [](CLI::App& a) { return cli::one_job_command(a, "watch"); }, true},
    {"cancel", "stop a job (ranks get SIGTERM, then SIGKILL)",
     [](CLI::App& a) { return cli::one_job_command(a, "cancel"); }, true},
    {"pause", "checkpoint and stop a job; resume continues it",
     [](CLI::App& a) { return cli::one_job_command(a, "pause"); }, true},
    {"resume", "queue a paused (or failed) job again from its last checkpoint",
     [](CLI::App& a) { return cli::one_job_command(a, "resume"); }, true},
    {"events", "a job's events (--follow: live, until it ends)", cli::events_command, true},
    {"checkpoints", "a job's checkpoints", cli::checkpoints_command, true},
    {"profile",
     "trace a running GPU job's next steps (CUPTI): a Chrome/Perfetto trace and where\n"
     "the GPU time went",
     cli::profile_command, true},
    {"export",
     "a checkpoint as a Hugging Face folder, written here (a LoRA job's adapter as a\n"
     "PEFT folder, or with --merged merged into the base)",
     cli::export_command, true},
    {"delete", "remove a finished job from the daemon (its output folder stays)",
     cli::delete_command, true},
    {"agents", "the node agents registered with the daemon (jobs with resources.nodes run there)",
     cli::agents_command, true},
};

void usage(FILE* out) {
    std::fprintf(out, "usage: deltatune COMMAND [flags]   (deltatune COMMAND --help: its flags)\n");
    for (const bool daemon : {false, true}) {
        std::fputs(daemon ? "\ncommands on deltatuned (--address HOST:PORT or $DELTATUNE_ADDRESS, "
                            "--token-file,\n--tls, --ca-file, --output text|json, --timeout):\n"
                          : "\nlocal commands:\n",
                   out);
        for (const Command& c : kCommands) {
            if (c.daemon != daemon) continue;
            std::string summary = c.summary;  // continuation lines under the first
            for (size_t at = 0; (at = summary.find('\n', at)) != std::string::npos; at += 16) {
                summary.replace(at, 1, "\n" + std::string(15, ' '));
            }
            std::fprintf(out, "  %-12s %s\n", c.name, summary.c_str());
        }
    }
    std::fputs(
        "\nexit status: 0 ok, 1 other, 2 bad command line or job file, 3 not found, 4 daemon\n"
        "unreachable, 5 refused, 6 unauthorised, 7 a watched job failed\n",
        out);
}

int run(const Command& c, const std::vector<std::string>& args) {
    CLI::App app{c.summary, std::string("deltatune ") + c.name};
    deltatune::daemon::configure_command_line(app);
    const CommandRun command = c.declare(app);
    if (const std::optional<int> status = deltatune::daemon::parse_or_exit_status(app, args)) {
        return *status;
    }
    return command();
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
        if (command == c.name) return run(c, args);
    }
    std::fprintf(stderr, "deltatune: unknown command '%s'\n", command.c_str());
    usage(stderr);
    return 2;
}
