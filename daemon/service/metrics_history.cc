#include "daemon/service/metrics_history.h"

#include <map>

#include "nlohmann/json.hpp"

namespace deltatune::daemon {

namespace {

// One event as a row: its step, time, attempt and metrics.
nlohmann::json row(const v1::JobEvent& e) {
    nlohmann::json r = nlohmann::json::object();
    for (const auto& [key, value] : e.metrics()) r[key] = value;
    r["time"] = static_cast<double>(e.time().seconds()) + e.time().nanos() * 1e-9;
    r["attempt"] = e.attempt();
    return r;
}

}  // namespace

absl::StatusOr<std::string> metrics_history_json(JobManager& manager, const std::string& name,
                                                 int64_t since_step) {
    absl::StatusOr<v1::Job> job = manager.get_job(name);
    if (!job.ok()) return job.status();
    // By step, the latest event wins: a step redone after a restart replaces the lost attempt's.
    std::map<int64_t, nlohmann::json> steps, evals;
    int64_t after = 0;
    while (true) {
        auto events = manager.events_after(job->name(), after, 1000);
        if (!events.ok()) return events.status();
        if (events->empty()) break;
        for (const v1::JobEvent& e : *events) {
            after = e.sequence();
            const bool step = e.type() == "STEP_METRICS", eval = e.type() == "EVAL_METRICS";
            const auto at = e.metrics().find("step");
            if ((!step && !eval) || at == e.metrics().end()) continue;
            const auto s = static_cast<int64_t>(at->second);
            if (s > since_step) (step ? steps : evals)[s] = row(e);
        }
    }
    nlohmann::json out = {{"job", job->name()},
                          {"since_step", since_step},
                          {"steps", nlohmann::json::array()},
                          {"evals", nlohmann::json::array()}};
    for (auto& [s, r] : steps) out["steps"].push_back(std::move(r));
    for (auto& [s, r] : evals) out["evals"].push_back(std::move(r));
    return out.dump() + "\n";
}

}  // namespace deltatune::daemon
