// Output folder ownership: the marker file, read and written through a PathSandbox confined to
// the outputs roots, so a symlink swapped into the folder cannot redirect either.
#include "daemon/jobs/output_claim.h"

#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

std::string marker_path(const std::string& output_dir) {
    return absl::StrCat(output_dir, "/", kOutputMarker);
}

bool holds_an_earlier_run(const PathSandbox& box, const std::string& output_dir) {
    return box.exists(output_dir + "/checkpoints") || box.exists(output_dir + "/export");
}

absl::Status in_use(const v1::JobSpec& spec, const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat("OUTPUT_DIR_IN_USE: output_dir '", spec.output_dir(), "' ", why));
}

}  // namespace

absl::StatusOr<OutputDirOwner> output_dir_owner(const PathSandbox& outputs,
                                                const std::string& output_dir) {
    using Kind = OutputDirOwner::Kind;
    absl::StatusOr<UniqueFd> fd = outputs.open(marker_path(output_dir), O_RDONLY | O_NOFOLLOW);
    if (absl::IsNotFound(fd.status())) {
        OutputDirOwner none;
        if (holds_an_earlier_run(outputs, output_dir)) none.kind = Kind::kEarlierRun;
        return none;
    }
    if (!fd.ok()) return fd.status();
    DT_ASSIGN_OR_RETURN(std::string text, read_fd(fd->get(), marker_path(output_dir)));
    std::string job(absl::StripAsciiWhitespace(text.substr(0, 256)));
    if (job.empty()) return OutputDirOwner{};
    return OutputDirOwner{Kind::kJob, std::move(job)};
}

absl::Status check_output_dir(const v1::JobSpec& spec, const std::string& job_name,
                              const OutputDirOwner& owner_of, bool owner_running) {
    using Kind = OutputDirOwner::Kind;
    if (owner_of.kind == Kind::kNobody) return absl::OkStatus();
    if (owner_of.kind == Kind::kEarlierRun) {
        return in_use(spec,
                      "holds the checkpoints or export of an earlier run that no job claims; "
                      "choose another output_dir (or move that run away)");
    }
    const std::string& owner = owner_of.job;
    if (owner == job_name) return absl::OkStatus();
    if (spec.resume_from() != owner) {
        return in_use(spec, absl::StrCat("belongs to ", owner,
                                         "; choose another output_dir, or set resume_from: ", owner,
                                         " to continue that job's run here"));
    }
    if (owner_running) {
        return in_use(spec, absl::StrCat("belongs to ", owner,
                                         ", which is still running; cancel or pause it first"));
    }
    return absl::OkStatus();
}

absl::Status claim_output_dir(const PathSandbox& outputs, const std::string& output_dir,
                              const std::string& job_name) {
    DT_RETURN_IF_ERROR(outputs.make_dirs(output_dir));
    const std::string text = job_name + "\n";
    return outputs.write_atomic(marker_path(output_dir), {{text.data(), text.size()}});
}

}  // namespace deltatune::daemon
