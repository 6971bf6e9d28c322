// FSDP/ZeRO-3 semantics on the CPU path: the parameters are cut into flat groups (one per decoder
// layer, one for everything else, in ParamSet order), each padded to a multiple of the world size
// and sharded evenly over the ranks. fp32 master weights and AdamW moments exist only for the
// local shard. A step reduce-scatters the fp32 gradients (sum over ranks), all-reduces the squared
// norm for clipping, updates the local shard, and all-gathers the groups back into the full
// parameters the model computes with. Checkpoints hold one file per rank; loading reassembles the
// groups from any world size's shards and takes this rank's slice, so a job resumes exactly at
// the same world size and reshards at another.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/dist/communicator.h"
#include "runtime/model/param_set.h"
#include "runtime/optim/adamw.h"

namespace deltatune {

class ShardedOptimizer {
  public:
    // Takes this rank's shard of `params` (identical on every rank) as its master weights.
    static ShardedOptimizer create(const ParamSet& params, Communicator* comm);

    // Adds one micro-batch's gradients (scaled so that their sum over micro-batches and ranks is
    // the global gradient) into fp64 accumulators. fp64 makes the sum of a few fp32 gradients
    // exact in practice, so it does not depend on how micro-batches are split over ranks: world
    // sizes 1, 2 and 3 then update the parameters identically, even where Adam's first steps
    // amplify rounding (elements whose gradient is near eps).
    void accumulate(const ParamSet& grads);
    // One optimizer step from the accumulated gradients: sums them over ranks (fp64), rounds this
    // rank's slice to fp32, clips by the global norm (torch.nn.utils.clip_grad_norm_ when
    // max_grad_norm > 0), updates the local shard and all-gathers `params` (equal on all ranks
    // afterwards). Returns the norm before clipping and clears the accumulators.
    absl::StatusOr<double> step(ParamSet& params, const AdamWHyper& hyper, double max_grad_norm);

    int64_t adam_step() const { return adam_.step; }
    void set_adam_step(int64_t step) { adam_.step = step; }
    // Group sizes (elements, unpadded): a checkpoint's layout, checked on load.
    std::vector<int64_t> group_sizes() const;
    // This rank's shard (master, m, v of every group) as one safetensors file.
    absl::Status save_shard(const std::string& path) const;
    // Loads from the shard files saved by ranks 0..W-1 (any world size W), then all-gathers
    // into `params`. InvalidArgument when the layout differs from this model's.
    absl::Status load(const std::vector<std::string>& rank_files, ParamSet& params);

  private:
    struct Member {
        size_t param = 0;  // index in ParamSet::all()
        int64_t offset = 0;
        int64_t numel = 0;
    };
    struct Group {
        std::string name;
        std::vector<Member> members;
        int64_t numel = 0;
        int64_t shard = 0;  // elements per rank: ceil(numel / world)
    };
    absl::Status gather_into(ParamSet& params);

    Communicator* comm_ = nullptr;
    std::vector<Group> groups_;
    ParamSet master_;                       // "<group>" -> {shard}
    std::vector<std::vector<double>> acc_;  // per group, world * shard (padded) gradient sums
    AdamWState adam_;
};

}  // namespace deltatune
