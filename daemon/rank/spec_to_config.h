// JobSpec (proto) -> TrainConfig (the runtime's plain struct), applying job.proto's defaults to
// unset fields. The runtime never sees protobuf.
#pragma once

#include "absl/status/statusor.h"
#include "deltatune/v1/job.pb.h"
#include "runtime/train/trainer.h"

namespace deltatune {

absl::StatusOr<TrainConfig> train_config_from_spec(const v1::JobSpec& spec);

}  // namespace deltatune
