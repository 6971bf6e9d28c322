// JobSpec -> job file YAML, the inverse of parse_job_yaml (job_yaml.h): what `deltatune get JOB
// --output yaml` prints, a job file that submits the same job again. Written by reflection over
// job.proto, so a field added there is written without a change here.
#pragma once

#include <string>

#include "deltatune/v1/job.pb.h"

namespace deltatune::daemon {

// Every field, zeros and defaults included (a stored spec is normalized: its defaults are
// explicit), in job.proto's order: messages as mappings, repeated fields as lists, map fields
// with their keys sorted, enums by their short lowercase name ("cosine"), doubles in their
// shortest round-trip form, data.train_files with data.train_weights as `[{path, weight}]`.
// A message or `optional` field that is not set is written as `null` (parse reads it as absent).
// parse_job_yaml -> normalize_job_spec of the result gives back `spec` exactly (for a normalized
// spec).
std::string job_spec_to_yaml(const v1::JobSpec& spec);

}  // namespace deltatune::daemon
