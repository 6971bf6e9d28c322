// A job's per-step series for pollers (GET /v1/jobs/{id}/metrics on the admin port): read from
// the STEP_METRICS and EVAL_METRICS events the job already records, so nothing new is stored.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/jobs/job_manager.h"

namespace deltatune::daemon {

// JSON: {"job": "jobs/ID", "since_step": N, "steps": [{"step": S, "time": UNIX_SECONDS,
// "attempt": A, <every metric of the event>}, ...], "evals": [same for eval metrics]}, steps
// after N in ascending order. A step trained again after a restart from a checkpoint appears
// once, as its latest attempt reported it. NotFound for an unknown job.
absl::StatusOr<std::string> metrics_history_json(JobManager& manager, const std::string& name,
                                                 int64_t since_step);

}  // namespace deltatune::daemon
