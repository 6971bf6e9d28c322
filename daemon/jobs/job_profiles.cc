// ProfileJob / GetProfile on the manager's side: the order rank 0 picks up with its next report
// (rank_reports.cc), and reading a finished profile back from the job's output folder.
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/jobs/job_manager_impl.h"
#include "daemon/random_hex.h"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

constexpr int kDefaultSteps = 3, kMaxSteps = 100;
constexpr int64_t kMaxProfileBytes = int64_t{1} << 30;          // what a rank may write
constexpr int64_t kMaxProfileMessageBytes = int64_t{64} << 20;  // GetProfile's one message

// The job's profile file, opened through the daemon's outputs sandbox without following a link
// in its last component, and only when its folder resolves inside the job's own output folder:
// the rank process wrote it and is not trusted with a path.
absl::StatusOr<JobManager::ProfileFile> open_profile_file(const PathSandbox& outputs,
                                                          const std::string& output_dir,
                                                          const std::string& id) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path root = fs::canonical(output_dir, ec);
    const fs::path dir = ec ? fs::path() : fs::canonical(fs::path(output_dir) / "profiles", ec);
    if (ec || dir.string().rfind(root.string() + "/", 0) != 0) {
        return absl::NotFoundError(
            absl::StrCat("profile ", id, ": no profiles folder in ", output_dir));
    }
    JobManager::ProfileFile file;
    file.path = (dir / (id + ".binpb")).string();
    absl::StatusOr<UniqueFd> fd = outputs.open(file.path, O_RDONLY | O_NOFOLLOW);
    if (!fd.ok()) {
        return absl::NotFoundError(absl::StrCat("profile ", id, ": ", file.path, " missing (",
                                                fd.status().message(), ")"));
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxProfileBytes) {
        return absl::DataLossError(absl::StrCat("profile ", id, ": ", file.path, " unreadable"));
    }
    file.fd = std::move(*fd);
    file.bytes = st.st_size;
    return file;
}

}  // namespace

absl::StatusOr<std::string> JobManager::request_profile(const std::string& name, int steps) {
    if (steps == 0) steps = kDefaultSteps;
    if (steps < 1 || steps > kMaxSteps) {
        return absl::InvalidArgumentError(
            absl::StrCat("steps (", steps, ") must be in [1, ", kMaxSteps, "]"));
    }
    const std::string id = random_hex(16);
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        DT_ASSIGN_OR_RETURN(Record * r, impl_->lookup(name));
        const v1::Job& j = r->stored.job;
        if (j.state() != v1::Job::RUNNING || !r->attempt) {
            return absl::FailedPreconditionError(absl::StrCat(
                "cannot profile ", j.name(), ": it is ", v1::Job::State_Name(j.state()),
                "; a profile traces the steps of a RUNNING job"));
        }
        if (j.spec().resources().gpus() <= 0) {
            return absl::FailedPreconditionError(absl::StrCat(
                "cannot profile ", j.name(),
                ": it trains on CPU ranks; a profile is a CUPTI trace of the GPU's kernels"));
        }
        if (r->attempt->profile_order) {
            return absl::FailedPreconditionError(
                absl::StrCat("cannot profile ", j.name(), ": profile ",
                             r->attempt->profile_order->first, " is ordered and not started yet"));
        }
        r->attempt->profile_order = {id, steps};
        Change c(r->stored);
        c.add("PROFILE_REQUESTED", v1::JobEvent::INFO,
              absl::StrCat("profile of the next ", steps, " step(s)"),
              {{"profile_id", id}, {"steps", std::to_string(steps)}});
        DT_RETURN_IF_ERROR(impl_->commit(*r, std::move(c)));
    }
    impl_->notify();
    return id;
}

absl::StatusOr<JobManager::ProfileFile> JobManager::open_profile(const std::string& name,
                                                                 const std::string& id) {
    if (!is_random_hex(id, 32)) {  // a profile id (random_hex(16)) names a file
        return absl::InvalidArgumentError(absl::StrCat("'", id, "' is not a profile id"));
    }
    DT_ASSIGN_OR_RETURN(const v1::Job job, get_job(name));
    // The outcome, from the job's own record: the rank's PROFILE_COMPLETED or _FAILED event
    // (every page of them: a long job may have profiled many times).
    std::optional<v1::JobEvent> outcome;
    for (const char* type : {"PROFILE_FAILED", "PROFILE_COMPLETED"}) {
        EventsRequest q;
        q.name = job.name(), q.type = type, q.page_size = 1000;
        do {
            DT_ASSIGN_OR_RETURN(EventsResult events, list_events(q));
            for (const v1::JobEvent& e : events.events) {
                auto it = e.details().find("profile_id");
                if (!outcome && it != e.details().end() && it->second == id) outcome = e;
            }
            q.page_token = events.next_page_token;
        } while (!outcome && !q.page_token.empty());
    }
    if (outcome && outcome->type() == "PROFILE_FAILED") {
        return absl::FailedPreconditionError(outcome->message());
    }
    if (outcome) return open_profile_file(*impl_->outputs, job.spec().output_dir(), id);
    return absl::NotFoundError(
        absl::StrCat("profile ", id, " of ", job.name(), ": not finished (or not ordered)"));
}

absl::StatusOr<v1::Profile> JobManager::get_profile(const std::string& name,
                                                    const std::string& id) {
    DT_ASSIGN_OR_RETURN(const ProfileFile file, open_profile(name, id));
    if (file.bytes > kMaxProfileMessageBytes) {
        return absl::FailedPreconditionError(
            absl::StrCat("profile ", id, " is ", file.bytes >> 20, " MiB, over GetProfile's ",
                         kMaxProfileMessageBytes >> 20,
                         " MiB: DownloadProfile streams it (deltatune profile "
                         "does)"));
    }
    DT_ASSIGN_OR_RETURN(const std::string bytes, read_fd(file.fd.get(), file.path));
    v1::Profile p;
    if (!p.ParseFromString(bytes) || p.profile_id() != id) {
        return absl::DataLossError(absl::StrCat("profile ", id, ": the file is corrupt"));
    }
    return p;
}

}  // namespace deltatune::daemon
