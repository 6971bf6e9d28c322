// The table of users' actions by state.
#include "daemon/jobs/job_actions.h"

#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace deltatune::daemon {
namespace {

using Job = v1::Job;

// One row: in state `from` (with one of `reasons`, when given), `action` does `outcome`: kMove
// leads to `with_ranks` while an attempt's ranks run and to `without_ranks` otherwise; kNothing
// (already there) and kRemove (delete) name no state. A state an action has no row for refuses
// it.
using Outcome = ActionOutcome::Kind;
struct Row {
    JobAction action;
    Job::State from;
    Outcome outcome;
    Job::State with_ranks = Job::STATE_UNSPECIFIED, without_ranks = Job::STATE_UNSPECIFIED;
    std::array<const char*, 2> reasons = {nullptr, nullptr};
};

constexpr Outcome kMove = ActionOutcome::kMove, kNothing = ActionOutcome::kNothing,
                  kRemove = ActionOutcome::kRemove;

// clang-format off
constexpr Row kRows[] = {
    {JobAction::kCancel, Job::QUEUED,      kMove,    Job::CANCELLING, Job::CANCELLED},
    {JobAction::kCancel, Job::PENDING,     kMove,    Job::CANCELLING, Job::CANCELLED},
    {JobAction::kCancel, Job::RUNNING,     kMove,    Job::CANCELLING, Job::CANCELLED},
    {JobAction::kCancel, Job::RECOVERING,  kMove,    Job::CANCELLING, Job::CANCELLED},
    {JobAction::kCancel, Job::PAUSING,     kMove,    Job::CANCELLING, Job::CANCELLED},
    {JobAction::kCancel, Job::PAUSED,      kMove,    Job::CANCELLING, Job::CANCELLED},
    {JobAction::kCancel, Job::CANCELLING,  kNothing},
    {JobAction::kCancel, Job::CANCELLED,   kNothing},
    {JobAction::kPause,  Job::QUEUED,      kMove,    Job::PAUSING,    Job::PAUSED},
    {JobAction::kPause,  Job::PENDING,     kMove,    Job::PAUSING,    Job::PAUSED},
    {JobAction::kPause,  Job::RUNNING,     kMove,    Job::PAUSING,    Job::PAUSED},
    {JobAction::kPause,  Job::RECOVERING,  kMove,    Job::PAUSING,    Job::PAUSED},
    {JobAction::kPause,  Job::PAUSING,     kNothing},
    {JobAction::kPause,  Job::PAUSED,      kNothing},
    {JobAction::kResume, Job::PAUSED,      kMove,    Job::QUEUED,     Job::QUEUED},
    // A failure retrying can fix: the restarts ran out, or a rank exited for no reason it named.
    {JobAction::kResume, Job::FAILED,      kMove,    Job::QUEUED,     Job::QUEUED,
     {"MAX_RESTARTS_EXCEEDED", "RANK_EXITED"}},
    {JobAction::kDelete, Job::SUCCEEDED,   kRemove},
    {JobAction::kDelete, Job::FAILED,      kRemove},
    {JobAction::kDelete, Job::CANCELLED,   kRemove},
};
// clang-format on

bool reason_fits(const Row& row, std::string_view reason) {
    if (row.reasons[0] == nullptr) return true;
    for (const char* r : row.reasons) {
        if (r != nullptr && reason == r) return true;
    }
    return false;
}

// "QUEUED, PENDING, PAUSED and FAILED (MAX_RESTARTS_EXCEEDED or RANK_EXITED)": the states where
// the action moves a job.
std::string applies_to(JobAction action) {
    std::vector<std::string> states;
    for (const Row& row : kRows) {
        if (row.action != action || row.outcome == kNothing) continue;
        std::string s = Job::State_Name(row.from);
        if (row.reasons[0] != nullptr) {
            std::vector<std::string> reasons;
            for (const char* r : row.reasons) {
                if (r != nullptr) reasons.emplace_back(r);
            }
            absl::StrAppend(&s, " (", absl::StrJoin(reasons, " or "), ")");
        }
        states.push_back(std::move(s));
    }
    return absl::StrJoin(states, ", ");
}

}  // namespace

const char* action_name(JobAction action) {
    switch (action) {
        case JobAction::kCancel:
            return "cancel";
        case JobAction::kPause:
            return "pause";
        case JobAction::kResume:
            return "resume";
        case JobAction::kDelete:
            return "delete";
    }
    return "?";
}

ActionOutcome apply_action(JobAction action, Job::State state, std::string_view reason,
                           bool has_ranks) {
    for (const Row& row : kRows) {
        if (row.action != action || row.from != state || !reason_fits(row, reason)) continue;
        if (row.outcome != kMove) return {row.outcome, state};
        return {kMove, has_ranks ? row.with_ranks : row.without_ranks};
    }
    return {ActionOutcome::kRefused, state};
}

std::string refusal_message(JobAction action, const Job& job) {
    std::string state = Job::State_Name(job.state());
    if (!job.state_reason().empty()) absl::StrAppend(&state, " (", job.state_reason(), ")");
    return absl::StrCat("cannot ", action_name(action), " ", job.name(), ": it is ", state, "; ",
                        action_name(action), " applies to ", applies_to(action));
}

}  // namespace deltatune::daemon
