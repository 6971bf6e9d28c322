// A node agent's own folder (its rank socket, and each attempt's spec and rank logs): private to
// the user the agent runs as. Another user's folder, or a link, at that path is refused: through
// one, a local user could read the ranks' logs and rewrite the specs they start from.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace deltatune::daemon {

// The default folder for `hostname`: /var/lib/deltatune-agent/<hostname> as root, else
// $XDG_STATE_HOME (or ~/.local/state)/deltatune/agent-<hostname>. FailedPrecondition where the
// user has neither a home nor $XDG_STATE_HOME (then --state-dir must say).
absl::StatusOr<std::string> default_agent_state_dir(const std::string& hostname);

// Creates `dir` where missing (mode 0700; missing parents 0755) and checks it: a directory, not
// a symbolic link, owned by this process's user. A folder of ours open to others is closed
// (0700). FailedPrecondition naming the path and what is wrong otherwise.
absl::Status prepare_private_dir(const std::string& dir);

}  // namespace deltatune::daemon
