// JobManager's user actions: cancel, pause, resume and delete, each read off the action table
// (job_actions.h) and applied to the job's record under the manager's lock.
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/jobs/job_actions.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/jobs/job_manager_impl.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

using v1::Job;
using v1::JobEvent;

absl::Status refused(const Record& r, JobAction action) {
    return absl::FailedPreconditionError(refusal_message(action, r.stored.job));
}

// One requested state change: under the lock, look the job up and let `decide` refuse it (an
// error), find it already made (no Change: the job is returned as it is) or describe it; then
// commit it, reorder the queue and wake the scheduler; listeners hear of it after the lock.
template <typename Decide>
absl::StatusOr<Job> transition(JobManager::Impl& m, const std::string& name, Decide decide) {
    absl::StatusOr<Job> out = [&]() -> absl::StatusOr<Job> {
        std::lock_guard<std::mutex> lock(m.mu);
        DT_ASSIGN_OR_RETURN(Record * r, m.lookup(name));
        DT_ASSIGN_OR_RETURN(std::optional<Change> c, decide(*r));
        if (!c) return m.view(*r);
        DT_RETURN_IF_ERROR(m.commit(*r, *std::move(c)));
        m.reorder_queue();
        m.wake = true;
        m.wake_cv.notify_all();
        return m.view(*r);
    }();
    m.notify();
    return out;
}

}  // namespace

absl::StatusOr<Job> JobManager::cancel_job(const std::string& name) {
    return transition(*impl_, name, [&](Record& r) -> absl::StatusOr<std::optional<Change>> {
        const Job& j = r.stored.job;
        const ActionOutcome o =
            apply_action(JobAction::kCancel, j.state(), j.state_reason(), r.attempt.has_value());
        if (o.kind == ActionOutcome::kNothing) return std::nullopt;
        if (o.kind == ActionOutcome::kRefused) return refused(r, JobAction::kCancel);
        Change c(r.stored);
        c.add("CANCEL_REQUESTED", JobEvent::INFO, "cancel requested");
        if (o.next == Job::CANCELLING) {
            // Ranks get SIGTERM now and SIGKILL after the grace period, so GPU memory is freed
            // within seconds even when a rank is stuck.
            r.attempt->ending = Ending::kCancel;
            impl_->terminate_ranks(r, impl_->opt.rank_term_grace);
            c.set_state(Job::CANCELLING, "CANCELLED_BY_USER");
        } else {
            c.set_state(Job::CANCELLED, "CANCELLED_BY_USER", "cancelled by the user");
            c.add("CANCELLED", JobEvent::INFO, "cancelled");
        }
        return c;
    });
}

absl::StatusOr<Job> JobManager::pause_job(const std::string& name) {
    return transition(*impl_, name, [&](Record& r) -> absl::StatusOr<std::optional<Change>> {
        const Job& j = r.stored.job;
        const ActionOutcome o =
            apply_action(JobAction::kPause, j.state(), j.state_reason(), r.attempt.has_value());
        if (o.kind == ActionOutcome::kNothing) return std::nullopt;
        if (o.kind == ActionOutcome::kRefused) return refused(r, JobAction::kPause);
        // Ranks already told to end otherwise (succeeded, cancelled, shut down) are not paused.
        if (r.attempt && r.attempt->ending != Ending::kNone &&
            r.attempt->ending != Ending::kFault) {
            return absl::FailedPreconditionError(
                absl::StrCat("cannot pause ", j.name(), ": its ranks are already ending"));
        }
        Change c(r.stored);
        c.add("PAUSE_REQUESTED", JobEvent::INFO, "pause requested");
        if (o.next == Job::PAUSING) {
            r.attempt->ending = Ending::kPause;  // ranks get CHECKPOINT_AND_EXIT
            c.set_state(Job::PAUSING);
        } else {
            c.set_state(Job::PAUSED);
            c.add("PAUSED", JobEvent::INFO, "paused");
        }
        return c;
    });
}

absl::StatusOr<Job> JobManager::resume_job(const std::string& name) {
    return transition(*impl_, name, [&](Record& r) -> absl::StatusOr<std::optional<Change>> {
        const Job& j = r.stored.job;
        const ActionOutcome o =
            apply_action(JobAction::kResume, j.state(), j.state_reason(), r.attempt.has_value());
        if (o.kind != ActionOutcome::kMove) return refused(r, JobAction::kResume);
        Change c(r.stored);
        if (c.next.job.has_start_time()) c.next.job.set_attempt(c.next.job.attempt() + 1);
        c.next.fault_count = 0;
        c.add("RESUME_REQUESTED", JobEvent::INFO, "resume requested");
        c.set_state(o.next);
        c.add("QUEUED", JobEvent::INFO, "waiting for a slot; resumes from the last checkpoint");
        return c;
    });
}

absl::Status JobManager::delete_job(const std::string& name) {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        DT_ASSIGN_OR_RETURN(Record * r, impl_->lookup(name));
        const Job& j = r->stored.job;
        if (apply_action(JobAction::kDelete, j.state(), j.state_reason(), false).kind !=
            ActionOutcome::kRemove) {
            return refused(*r, JobAction::kDelete);
        }
        const StoredJob gone = r->stored;
        DT_RETURN_IF_ERROR(impl_->store->remove(gone.id));
        impl_->by_seq.erase(gone.create_seq);
        impl_->by_request_id.erase(gone.job.request_id());
        impl_->jobs.erase(gone.id);
    }
    impl_->notify();
    return absl::OkStatus();
}

}  // namespace deltatune::daemon
