// JobManager: applying rank reports (rank.proto). Ranks are local, same-user processes, but a
// report is still bounded (events per report) and checked against the current attempt, so a stray
// or stale rank is told to exit instead of corrupting the job.
#include <google/protobuf/util/message_differencer.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/jobs/job_manager_impl.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

using v1::Job;
using v1::JobEvent;

// A number from an event's details, else from its metrics (the trainer puts step and bytes in
// metrics, path and sha256 in details).
int64_t event_number(const v1::JobEvent& e, const std::string& key) {
    int64_t v = 0;
    auto d = e.details().find(key);
    if (d != e.details().end() && absl::SimpleAtoi(d->second, &v)) return v;
    auto m = e.metrics().find(key);
    return m != e.metrics().end() ? static_cast<int64_t>(m->second) : 0;
}

double event_metric(const v1::JobEvent& e, const std::string& key) {
    auto m = e.metrics().find(key);
    return m != e.metrics().end() ? m->second : 0;
}

// What the ranks made of the data (DATA_LOADED) and the run's length (TRAINING_STARTED: with
// num_epochs, the steps are known from here on) stay on the job.
void apply_data_summary(const v1::JobEvent& e, v1::Job& job) {
    v1::DataSummary* d = job.mutable_data_summary();
    auto count = [&](const char* key) { return event_number(e, key); };
    if (e.type() == "DATA_LOADED") {
        d->set_documents(count("num_samples"));
        d->set_skipped_lines(count("skipped_lines"));
        d->set_overlong(job.spec().data().overlong());
        d->set_overlong_documents(count("overlong_documents"));
        d->set_overlong_tokens_left_out(count("overlong_tokens_left_out"));
    } else if (e.type() == "TRAINING_STARTED" && e.metrics().count("max_steps")) {
        d->set_steps_per_epoch(count("steps_per_epoch"));
        d->set_tokens_per_epoch(count("tokens_per_epoch"));
        d->set_warmup_steps(count("warmup_steps"));
        job.mutable_progress()->set_total_steps(count("max_steps"));
    }
}

// Applies one rank event to the pending change.
void apply_rank_event(Record& r, Change& c, const v1::JobEvent& in, int rank) {
    Attempt& a = *r.attempt;
    JobEvent& e = c.events.emplace_back(in);
    e.set_sequence(0);  // the supervisor numbers events
    e.set_attempt(a.number);
    auto& details = *e.mutable_details();
    if (!details.count("rank")) details["rank"] = std::to_string(rank);
    if (e.type() == "EXPORT_COMPLETED" && details.count("path")) a.export_path = details["path"];
    if (rank == 0) apply_data_summary(e, c.next.job);
    // What the data holds, and the last evaluation (the final one comes after the last
    // progress report), stay on the job's status.
    static const std::map<std::string, std::vector<std::string>> kKept = {
        {"DATA_LOADED", {"skipped_lines", "trained_tokens"}},
        {"EVAL_METRICS", {"eval_loss", "best_eval_loss"}}};
    if (auto kept = kKept.find(e.type()); kept != kKept.end()) {
        for (const std::string& key : kept->second) {
            auto m = e.metrics().find(key);
            if (m != e.metrics().end()) (*c.next.job.mutable_latest_metrics())[key] = m->second;
        }
    }
    if (e.level() == JobEvent::ERROR) {
        r.last_error_reason = details.count("reason") ? details["reason"] : "";
        r.last_error_message = e.message();
    }
    if (e.type() == "CHECKPOINT_COMMITTED" && details.count("path")) {
        v1::Checkpoint& cp = c.checkpoints.emplace_back();
        cp.set_step(event_number(e, "step"));
        cp.set_path(details["path"]);
        cp.set_bytes(event_number(e, "bytes"));
        cp.set_manifest_sha256(details["sha256"]);
        cp.set_eval_loss(event_metric(e, "eval_loss"));
        cp.set_best(details.count("best") && details.at("best") == "true");
        if (cp.best()) c.next.job.set_best_step(cp.step());
        c.next.job.set_latest_checkpoint(details["path"]);
    }
    // Ranks on a node agent outlive a supervisor crash for a while and may checkpoint steps
    // whose reports were lost with it: say so rather than leave a silent gap in the metrics.
    // (Last: adding an event moves `e`.)
    const int64_t reported = r.stored.job.progress().step();
    const int64_t resumed = e.type() == "RESUMED" ? event_number(e, "step") : 0;
    if (resumed > reported && rank == 0) {
        c.add("STEPS_UNREPORTED", JobEvent::WARNING,
              absl::StrCat("steps ", reported + 1, "-", resumed,
                           " ran while the supervisor could not be reached: their metrics were "
                           "not received; the checkpoint at step ",
                           resumed, " holds their training"),
              {{"from_step", std::to_string(reported + 1)}, {"to_step", std::to_string(resumed)}});
    }
}

v1::RankDirective directive(v1::RankDirective::Action action) {
    v1::RankDirective d;
    d.set_action(action);
    return d;
}

}  // namespace

v1::RankDirective::Action JobManager::Impl::action_for(Ending ending) const {
    switch (ending) {
        case Ending::kNone:
            return shutting_down ? v1::RankDirective::CHECKPOINT_AND_EXIT
                                 : v1::RankDirective::CONTINUE;
        case Ending::kSucceeded:
            return v1::RankDirective::CONTINUE;
        case Ending::kPause:
        case Ending::kShutdown:
        case Ending::kDrain:
            return v1::RankDirective::CHECKPOINT_AND_EXIT;
        default:
            return v1::RankDirective::EXIT_NOW;
    }
}

v1::RankDirective JobManager::Impl::report(const v1::RankReport& rep) {
    constexpr int kMaxEventsPerReport = 1000;
    const std::string& name = rep.job();
    auto it = jobs.find(name.rfind("jobs/", 0) == 0 ? name.substr(5) : name);
    // A report from a rank we do not supervise (an old attempt, a stray) tells it to exit.
    if (it == jobs.end() || !it->second.attempt) return directive(v1::RankDirective::EXIT_NOW);
    Record& r = it->second;
    Attempt& a = *r.attempt;
    const int rank = rep.rank();
    if (rep.attempt() != a.number || rank < 0 || rank >= static_cast<int>(a.exited.size()) ||
        a.exited[rank]) {
        return directive(v1::RankDirective::EXIT_NOW);
    }
    a.last_report[rank] = Clock::now();
    Change c(r.stored);
    for (int i = 0; i < rep.events_size() && i < kMaxEventsPerReport; ++i) {
        apply_rank_event(r, c, rep.events(i), rank);
    }
    Job& j = c.next.job;
    if (rank == 0 && rep.has_progress()) {
        v1::Progress* p = j.mutable_progress();
        *p = rep.progress();
        if (p->total_steps() == 0) p->set_total_steps(r.stored.job.progress().total_steps());
        if (p->total_steps() == 0) p->set_total_steps(j.spec().hyperparameters().max_steps());
        if (p->percent() == 0 && p->total_steps() > 0) {
            p->set_percent(100.0 * static_cast<double>(p->step()) / p->total_steps());
        }
    }
    if (rank == 0) {
        for (const auto& [k, v] : rep.latest_metrics()) (*j.mutable_latest_metrics())[k] = v;
    }
    if (!rep.latest_checkpoint().empty()) j.set_latest_checkpoint(rep.latest_checkpoint());
    if (a.ending == Ending::kNone && j.state() == Job::PENDING) c.set_state(Job::RUNNING);
    if (a.ending == Ending::kNone && j.state() == Job::RECOVERING) {
        c.set_state(Job::RUNNING);
        c.add("RECOVERY_COMPLETED", JobEvent::INFO, "ranks report again",
              {{"resumed_from", j.latest_checkpoint()}});
    }
    if (!c.events.empty() ||
        !google::protobuf::util::MessageDifferencer::Equals(c.next.job, r.stored.job)) {
        log_error(commit(r, std::move(c)));
    }
    v1::RankDirective d = directive(action_for(a.ending));
    if (rank == 0 && a.profile_order && d.action() == v1::RankDirective::CONTINUE) {
        d.set_profile_id(a.profile_order->first);
        d.set_profile_steps(a.profile_order->second);
        a.profile_order.reset();
    }
    return d;
}

}  // namespace deltatune::daemon

namespace deltatune::daemon {
namespace {

// The current attempt of `job`, or FailedPrecondition naming what is stale.
absl::StatusOr<Attempt*> current_attempt(JobManager::Impl& m, const std::string& job, int attempt) {
    auto it = m.jobs.find(job.rfind("jobs/", 0) == 0 ? job.substr(5) : job);
    if (it == m.jobs.end() || !it->second.attempt || it->second.attempt->number != attempt) {
        return absl::FailedPreconditionError(
            absl::StrCat(job, " attempt ", attempt, " is not running"));
    }
    return &*it->second.attempt;
}

}  // namespace

absl::Status JobManager::store_set(const std::string& job, int attempt, const std::string& key,
                                   std::string value) {
    constexpr size_t kMaxKeys = 4096, kMaxBytes = 1 << 20;
    if (key.size() > 1024 || value.size() > kMaxBytes) {
        return absl::InvalidArgumentError("rendezvous key or value too large");
    }
    std::lock_guard<std::mutex> lock(impl_->mu);
    DT_ASSIGN_OR_RETURN(Attempt * a, current_attempt(*impl_, job, attempt));
    if (a->rendezvous.size() >= kMaxKeys && !a->rendezvous.count(key)) {
        return absl::ResourceExhaustedError("rendezvous store full");
    }
    a->rendezvous[key] = std::move(value);
    return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> JobManager::store_get(const std::string& job,
                                                                 int attempt,
                                                                 const std::string& key) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    DT_ASSIGN_OR_RETURN(Attempt * a, current_attempt(*impl_, job, attempt));
    auto it = a->rendezvous.find(key);
    if (it == a->rendezvous.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
}

}  // namespace deltatune::daemon
