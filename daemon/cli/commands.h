// Subcommands of the `deltatune` CLI. Each takes the arguments after its name and returns the
// process exit code; errors are printed to stderr as one line.
#pragma once

#include <string>
#include <vector>

namespace deltatune::cli {

int init_model_command(const std::vector<std::string>& args);
int step_command(const std::vector<std::string>& args);
// The 27B-slice training-step benchmark on a random model (docs/performance.md); one JSON
// line.
int bench_command(const std::vector<std::string>& args);
// Prints which implementation each op of the training step uses on this machine.
int kernels_command(const std::vector<std::string>& args);
int pack_stats_command(const std::vector<std::string>& args);
int tokenize_command(const std::vector<std::string>& args);
// Trains a job YAML in this process (optionally as one of several Gloo ranks).
int train_command(const std::vector<std::string>& args);
// The node agents registered with the supervisor (gRPC AgentService.ListAgents).
int agents_command(const std::vector<std::string>& args);
// submit|get|list|watch|cancel|pause|resume|events|delete|checkpoints|export|profile (gRPC to
// deltatuned).
int job_command(const std::string& command, const std::vector<std::string>& args);
// A job's checkpoints; one of them exported here as a Hugging Face folder; a trace of its next
// steps (job_files_commands.cc).
int checkpoints_command(const std::vector<std::string>& args);
int export_command(const std::vector<std::string>& args);
int profile_command(const std::vector<std::string>& args);

}  // namespace deltatune::cli
