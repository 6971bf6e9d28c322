// What a layer keeps between forward and backward: the GPU model runs it, the memory planner
// counts it, jobs and `deltatune bench` name it. kNone keeps every activation the backward reads;
// kLayer keeps only the layer input (the residual stream) and recomputes the layer's forward at
// the start of its backward.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace deltatune {

enum class Recompute : uint8_t { kNone, kLayer };
absl::StatusOr<Recompute> parse_recompute(const std::string& name);  // "none" | "layer"
const char* recompute_name(Recompute r);

}  // namespace deltatune
