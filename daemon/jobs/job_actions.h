// What a user's action does to a job in each state: one table (job_actions.cc), read by the job
// manager to move a job and to word a refusal, so the states an action applies to are written
// once.
#pragma once

#include <string>
#include <string_view>

#include "deltatune/v1/job.pb.h"

namespace deltatune::daemon {

enum class JobAction { kCancel, kPause, kResume, kDelete };

// "cancel", "pause", "resume", "delete".
const char* action_name(JobAction action);

struct ActionOutcome {
    enum Kind {
        kRefused,  // the action does not apply in this state
        kNothing,  // the job is already where the action leads (asked twice)
        kMove,     // the job moves to `next`
        kRemove,   // the job leaves the daemon (delete)
    };
    Kind kind = kRefused;
    v1::Job::State next = v1::Job::STATE_UNSPECIFIED;
};

// The action on a job in `state` whose state_reason is `reason`; `has_ranks`: an attempt's ranks
// are running, so the job passes through CANCELLING or PAUSING while they stop.
ActionOutcome apply_action(JobAction action, v1::Job::State state, std::string_view reason,
                           bool has_ranks);

// FAILED_PRECONDITION for a refused action, naming the states (and reasons) it applies to:
// "cannot pause jobs/ab12: it is SUCCEEDED; pause applies to QUEUED, PENDING, RUNNING,
// RECOVERING".
std::string refusal_message(JobAction action, const v1::Job& job);

}  // namespace deltatune::daemon
