#include "daemon/agents/agent_state_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "runtime/base/path_sandbox.h"

namespace deltatune::daemon {
namespace {

absl::Status refuse(const std::string& dir, const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat("agent state dir ", dir, ": ", why, " (name another with --state-dir)"));
}

}  // namespace

absl::StatusOr<std::string> default_agent_state_dir(const std::string& hostname) {
    if (geteuid() == 0) return "/var/lib/deltatune-agent/" + hostname;
    const char* xdg = std::getenv("XDG_STATE_HOME");
    if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/deltatune/agent-", hostname);
    const char* home = std::getenv("HOME");
    if (home != nullptr && home[0] == '/') {
        return absl::StrCat(home, "/.local/state/deltatune/agent-", hostname);
    }
    return absl::FailedPreconditionError(
        "no default agent state dir: neither $XDG_STATE_HOME nor $HOME is an absolute path; "
        "name one with --state-dir");
}

absl::Status prepare_private_dir(const std::string& dir) {
    std::error_code ec;
    const std::filesystem::path path(dir);
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) return refuse(dir, absl::StrCat("cannot create its parent: ", ec.message()));
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        return refuse(dir, absl::StrCat("cannot create it: ", std::strerror(errno)));
    }
    // Opened without following a link, then checked by descriptor: what is checked is what the
    // agent uses.
    const UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) {
        return refuse(dir, errno == ELOOP || errno == ENOTDIR
                               ? "not a directory (a symbolic link or a file)"
                               : absl::StrCat("cannot open it: ", std::strerror(errno)));
    }
    struct stat st {};
    if (fstat(fd.get(), &st) != 0) {
        return refuse(dir, absl::StrCat("cannot stat it: ", std::strerror(errno)));
    }
    if (st.st_uid != geteuid()) {
        return refuse(
            dir, absl::StrCat("owned by uid ", st.st_uid, ", not by this agent's uid ", geteuid()));
    }
    if ((st.st_mode & 077) != 0 && fchmod(fd.get(), 0700) != 0) {
        return refuse(
            dir, absl::StrCat("open to other users and cannot be closed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
}

}  // namespace deltatune::daemon
