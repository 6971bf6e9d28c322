// The CPU ranks' update: clipping by the global norm (torch.nn.utils.clip_grad_norm_) written
// once, and AdamW through the kernels' reference, for every CPU store: FSDP shards
// (runtime/distributed/fsdp_cpu.h) and the LoRA adapter's sharded optimizer (sharded_optimizer.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/optim/adamw.h"
#include "runtime/distributed/fsdp_cpu.h"
#include "runtime/model/cpu_param_source.h"

namespace deltatune {

// Gradients are scaled by max_grad_norm / (norm + 1e-6) when max_grad_norm > 0 and the norm
// exceeds it.
struct GradClip {
    bool active = false;
    float scale = 1.0f;
};
GradClip grad_clip(double norm, double max_grad_norm);

// Clips each piece's gradient (in place, when active), then one AdamW step (1-based `step`).
void clip_and_adamw(const std::vector<CpuUpdatePiece>& pieces, const GradClip& clip,
                    const AdamWHyper& hyper, int64_t step);

// One step of an FSDP CPU rank over its shard of the reduced gradients: the global norm (squares
// summed in fp64 over the ranks), clipping, AdamW. Returns the norm before clipping.
absl::StatusOr<double> fsdp_cpu_step(FsdpCpuParams& store, const AdamWHyper& hyper,
                                     double max_grad_norm);

}  // namespace deltatune
