// JobSpec (proto) -> TrainConfig (the runtime's plain struct): a field-by-field mapping of a spec
// that normalize_job_spec has given its defaults and validate_job_spec has accepted
// (daemon/config/); it adds no defaults and checks nothing. The runtime never sees protobuf.
#pragma once

#include "deltatune/v1/job.pb.h"
#include "runtime/model/lora.h"
#include "runtime/train/trainer.h"

namespace deltatune {

TrainConfig train_config_from_spec(const v1::JobSpec& spec);
// The LoRA half of it (rank, alpha, rsLoRA, targets) for an adapter of type "lora" whose
// target_modules validation accepted; the memory planner sizes the same adapter from it.
LoraSpec lora_spec_from(const v1::AdapterSpec& adapter);

}  // namespace deltatune
