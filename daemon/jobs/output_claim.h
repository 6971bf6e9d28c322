// An output folder belongs to one job. The first job to use an output_dir leaves a marker in it
// (.deltatune-job, holding the job's name); another job that names the same folder is refused
// at submission, unless its spec says `resume_from:` the owner (which then hands the folder
// over). Without this a second job silently resumed from the first one's checkpoints and
// overwrote its export.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deltatune/v1/job.pb.h"
#include "runtime/base/path_sandbox.h"

namespace deltatune::daemon {

inline constexpr char kOutputMarker[] = ".deltatune-job";

// Whom an output folder belongs to.
struct OutputDirOwner {
    enum class Kind {
        kNobody,      // no folder, or a folder with neither a marker nor an earlier run
        kJob,         // the job named in the marker
        kEarlierRun,  // no marker, but checkpoints or an export that no job claims
    };
    Kind kind = Kind::kNobody;
    std::string job;  // kJob: the marker's job name
};

// Reads output_dir's marker through `outputs`, a sandbox confined to the outputs roots.
absl::StatusOr<OutputDirOwner> output_dir_owner(const PathSandbox& outputs,
                                                const std::string& output_dir);

// FAILED_PRECONDITION "OUTPUT_DIR_IN_USE: ..." when `spec.output_dir` holds another job's
// marker (and resume_from does not name that job) or, with no marker, checkpoints or an export of
// an earlier run. `owner_running` tells whether a named owner still runs (it cannot be taken
// over then).
absl::Status check_output_dir(const v1::JobSpec& spec, const std::string& job_name,
                              const OutputDirOwner& owner, bool owner_running);

// Creates output_dir (beneath the roots, through descriptors) and writes the marker naming
// `job_name`, replacing an owner's marker that check_output_dir allowed.
absl::Status claim_output_dir(const PathSandbox& outputs, const std::string& output_dir,
                              const std::string& job_name);

}  // namespace deltatune::daemon
