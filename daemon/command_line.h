// Command lines of deltatune, deltatuned and its agent and rank modes, read by CLI11: each flag is
// declared once (name, value, default, check, help line), and --help is generated from those
// declarations. Flags are --name VALUE or --name=VALUE; a repeated flag keeps its last value unless
// declared to collect them all (--label). A bad command line is one line naming the flag and the
// value, and exit status 2.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace deltatune::daemon {

// Exit status of a bad command line (the CLI's kExitUsage; deltatuned's and the agent's too).
inline constexpr int kExitBadCommandLine = 2;

// Sets what every command line shares: repeated flags keep the last value, defaults are shown in
// --help, and the help's first column fits the longest flag.
void configure_command_line(CLI::App& app);

// Checks of a flag's text, run before it converts; CLI11 prefixes the flag's name, so a bad value
// reads "--since: '-1' is not a non-negative integer".
// Digits only: no sign, no exponent (a -1 given for a count would otherwise wrap around).
const CLI::Validator& non_negative_integer();
// A decimal number as strtod reads it, wholly.
const CLI::Validator& number();
// A flag holding a count, a size or a number of seconds (--steps N): digits only.
template <typename T>
CLI::Option* add_count(CLI::App& app, const std::string& name, T& value, const std::string& help) {
    return app.add_option(name, value, help)->check(non_negative_integer())->type_name("N");
}
// Restricts `option` to `choices`, which --help shows as its value (text|json|yaml); another value
// reads "--output: expected text, json or yaml, got 'xml'".
CLI::Option* one_of(CLI::Option* option, std::vector<std::string> choices);
// Makes `option` (of a vector) take one value per use and keep them all: --label a=1 --label b=2.
CLI::Option* repeated(CLI::Option* option);

// Parses `args` (what follows the program and command names) into `app`'s declarations. OK to go
// on; InvalidArgument holding the one line for a bad command line. `help` is set (and nothing
// else checked) when --help or -h was given.
absl::Status parse_command_line(CLI::App& app, std::vector<std::string> args, bool* help);

// parse_command_line for an entry point: nullopt to run the command; otherwise the exit status,
// 0 after printing the help on stdout, 2 after printing "NAME: message" on stderr (NAME: the
// app's name, e.g. "deltatune submit").
std::optional<int> parse_or_exit_status(CLI::App& app, std::vector<std::string> args);

}  // namespace deltatune::daemon
