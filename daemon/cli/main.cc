// The deltatune command-line client. Subcommands that exist today run locally on the CPU
// reference path; the job commands (submit, list, ...) arrive with the daemon.
#include <cstdio>
#include <cstring>
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
        "       [--update-out F.safetensors] [--lr X --beta1 X --beta2 X --eps X --weight-decay "
        "X]\n");
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
    std::fprintf(stderr, "deltatune: unknown command '%s'\n", command.c_str());
    usage(stderr);
    return 2;
}
