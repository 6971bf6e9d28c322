// The users' actions by job state (daemon/jobs/job_actions.h): where each leads, what it refuses,
// and refusals that name exactly the states the table lets the action apply to.
#include <catch2/catch.hpp>

#include "daemon/jobs/job_actions.h"

namespace deltatune::daemon {
namespace {

using Job = v1::Job;
using K = ActionOutcome::Kind;

ActionOutcome act(JobAction a, Job::State s, bool ranks = false, const char* reason = "") {
    return apply_action(a, s, reason, ranks);
}

TEST_CASE("cancel and pause pass through their -ING state while ranks stop", "[daemon][jobs]") {
    CHECK(act(JobAction::kCancel, Job::RUNNING, true).next == Job::CANCELLING);
    CHECK(act(JobAction::kCancel, Job::QUEUED).next == Job::CANCELLED);
    CHECK(act(JobAction::kCancel, Job::PAUSED).next == Job::CANCELLED);
    CHECK(act(JobAction::kCancel, Job::CANCELLING, true).kind == K::kNothing);
    CHECK(act(JobAction::kCancel, Job::SUCCEEDED).kind == K::kRefused);
    CHECK(act(JobAction::kPause, Job::RECOVERING, true).next == Job::PAUSING);
    CHECK(act(JobAction::kPause, Job::QUEUED).next == Job::PAUSED);
    CHECK(act(JobAction::kPause, Job::PAUSED).kind == K::kNothing);
    CHECK(act(JobAction::kPause, Job::CANCELLING, true).kind == K::kRefused);
}

TEST_CASE("resume takes paused jobs and failures a retry can fix", "[daemon][jobs]") {
    CHECK(act(JobAction::kResume, Job::PAUSED).next == Job::QUEUED);
    CHECK(act(JobAction::kResume, Job::FAILED, false, "MAX_RESTARTS_EXCEEDED").next == Job::QUEUED);
    CHECK(act(JobAction::kResume, Job::FAILED, false, "RANK_EXITED").next == Job::QUEUED);
    CHECK(act(JobAction::kResume, Job::FAILED, false, "NON_FINITE").kind == K::kRefused);
    CHECK(act(JobAction::kResume, Job::RUNNING, true).kind == K::kRefused);
    CHECK(act(JobAction::kDelete, Job::CANCELLED).kind == K::kRemove);
    CHECK(act(JobAction::kDelete, Job::PAUSED).kind == K::kRefused);
}

TEST_CASE("a refusal names the states the table lets the action apply to", "[daemon][jobs]") {
    Job job;
    job.set_name("jobs/ab12");
    job.set_state(Job::FAILED);
    job.set_state_reason("NON_FINITE");
    // RANK_EXITED is resumable and said so: the message once listed MAX_RESTARTS_EXCEEDED only.
    CHECK(refusal_message(JobAction::kResume, job) ==
          "cannot resume jobs/ab12: it is FAILED (NON_FINITE); resume applies to PAUSED, FAILED "
          "(MAX_RESTARTS_EXCEEDED or RANK_EXITED)");
    job.set_state(Job::SUCCEEDED);
    job.clear_state_reason();
    CHECK(refusal_message(JobAction::kPause, job) ==
          "cannot pause jobs/ab12: it is SUCCEEDED; pause applies to QUEUED, PENDING, RUNNING, "
          "RECOVERING");
    CHECK(refusal_message(JobAction::kCancel, job) ==
          "cannot cancel jobs/ab12: it is SUCCEEDED; cancel applies to QUEUED, PENDING, RUNNING, "
          "RECOVERING, PAUSING, PAUSED");
    job.set_state(Job::RUNNING);
    CHECK(refusal_message(JobAction::kDelete, job) ==
          "cannot delete jobs/ab12: it is RUNNING; delete applies to SUCCEEDED, FAILED, CANCELLED");
}

}  // namespace
}  // namespace deltatune::daemon
