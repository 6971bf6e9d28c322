// How the CPU model's parameters are grouped for sharding, and the hook through which a sharded
// store makes them present (the model never calls a collective; runtime/distributed supplies
// the sharded store, runtime/distributed/fsdp_cpu.h).
//
// Units are what a sharded store gathers at once, as on the GPU: unit 0 is the embedding, units
// 1..L the decoder layers, unit L+1 the head (final norm and lm_head; with tied embeddings the
// embedding lives there too and unit 0 is empty).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

// The unit of parameter `name` (a canonical text-layout name) in a model of `num_layers` layers.
int cpu_param_unit(const std::string& name, int64_t num_layers, bool tied);
inline int cpu_head_unit(int64_t num_layers) {
    return static_cast<int>(num_layers) + 1;
}

// The model acquires a unit before computing with it and releases it after, in the step's order
// (forward: 0, 1..L, head; backward: head, L..1, 0; a tied model holds the head from before the
// embedding to after it). Between acquire and release the unit's values are present in the
// parameter set the model was built over; in the backward phase also its gradients, zero at
// acquire, which the model accumulates (+=) and the store takes over at release.
// One piece of a CPU store's trained values as the optimizer (runtime/optim/cpu_update.h) sees
// it: n fp32 parameters, their gradient and AdamW moments.
struct CpuUpdatePiece {
    float* param;
    float* grad;
    float* m;
    float* v;
    int64_t n;
};

class CpuParamSource {
  public:
    enum class Phase { kForward, kBackward };
    virtual ~CpuParamSource() = default;
    virtual absl::Status acquire(int unit, Phase phase) = 0;
    virtual absl::Status release(int unit, Phase phase) = 0;
};

}  // namespace deltatune
