// Subcommands of the `deltatune` CLI. Each declares its flags and arguments on the CLI11 app it is
// given (named "deltatune NAME", its description set by main.cc) and returns what runs it once
// the command line has parsed: a function giving the process's exit status, errors printed to
// stderr as one line. That function owns what the flags are parsed into: keep it while `app`
// parses. --help is generated from those declarations.
#pragma once

#include <functional>
#include <string>

#include "daemon/command_line.h"

namespace deltatune::cli {

using CommandRun = std::function<int()>;

CommandRun init_model_command(CLI::App& app);
CommandRun step_command(CLI::App& app);
// The 27B-slice training-step benchmark on a random model (docs/performance.md); one JSON
// line.
CommandRun bench_command(CLI::App& app);
// Prints which implementation each op of the training step uses on this machine.
CommandRun kernels_command(CLI::App& app);
CommandRun pack_stats_command(CLI::App& app);
CommandRun tokenize_command(CLI::App& app);
// Trains a job YAML in this process (optionally as one of several Gloo ranks).
CommandRun train_command(CLI::App& app);
// The node agents registered with the supervisor (gRPC AgentService.ListAgents).
CommandRun agents_command(CLI::App& app);
// The commands that talk to deltatuned about jobs (gRPC): submit, list, events, delete
// (job_commands.cc); get, cancel, pause, resume and watch, on one job each (`command`).
CommandRun submit_command(CLI::App& app);
CommandRun list_command(CLI::App& app);
CommandRun events_command(CLI::App& app);
CommandRun delete_command(CLI::App& app);
CommandRun one_job_command(CLI::App& app, const std::string& command);
// A job's checkpoints; one of them exported here as a Hugging Face folder; a trace of its next
// steps (job_files_commands.cc).
CommandRun checkpoints_command(CLI::App& app);
CommandRun export_command(CLI::App& app);
CommandRun profile_command(CLI::App& app);

}  // namespace deltatune::cli
