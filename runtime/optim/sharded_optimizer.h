// FSDP/ZeRO semantics on the CPU path: the parameters are cut into flat groups (one per decoder
// layer, one for everything else, in ParamSet order), each padded to a multiple of the world size
// and sharded evenly over the ranks. AdamW moments exist only for the local shard, and the local
// shard's master weights are the parameters themselves (the CPU model computes in fp32: a copy
// would hold the same bits). A step sums the gradients over ranks in fp64, group by group in
// bounded pieces, all-reduces the squared norm for clipping, updates this rank's slice of the
// parameters in place and all-gathers the groups back. Checkpoints hold one file per rank;
// loading reassembles the groups from any world size's shards and takes this rank's slice, so a
// job resumes exactly at the same world size and reshards at another.
//
// Host memory per rank beyond the parameters and the model's gradients: the moments (8 bytes a
// parameter / world size), fp64 accumulators only for a rank that runs several micro-batches in
// a step (8 bytes a parameter), and pieces of a few MB.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/checkpoint/sharded_state_io.h"
#include "runtime/distributed/communicator.h"
#include "runtime/model/param_set.h"
#include "runtime/optim/adamw.h"

namespace deltatune {

class ShardedOptimizer {
  public:
    // `params` (identical on every rank) must outlive the optimizer, which updates them in place.
    static ShardedOptimizer create(ParamSet& params, Communicator* comm);

    // The flat groups of a parameter set, in order (one per decoder layer, "other" for the
    // rest), and where each parameter lies in them: the checkpoint layout of CPU ranks.
    struct FlatLayout {
        std::vector<std::string> names;  // "layer.3", "other"
        std::vector<int64_t> sizes;      // elements, unpadded
        std::vector<size_t> group;       // per parameter
        std::vector<int64_t> offset;     // per parameter: elements into its group
    };
    static FlatLayout flat_layout(const ParamSet& params);
    // Elements per rank of a group of `numel` elements over `world` ranks (the last padded).
    static int64_t group_shard(int64_t numel, int64_t world) { return (numel + world - 1) / world; }

    // Keeps one micro-batch's gradients (scaled so that their sum over micro-batches and ranks is
    // the global gradient) in fp64 accumulators, made by the first call of a step. fp64 makes the
    // sum of a few fp32 gradients exact in practice, so it does not depend on how micro-batches
    // are split over ranks: world sizes 1, 2 and 3 then update the parameters identically, even
    // where Adam's first steps amplify rounding (elements whose gradient is near eps).
    void accumulate(const ParamSet& grads);
    // One optimizer step from the accumulated gradients plus `last` (a micro-batch's gradients
    // not passed to accumulate, or null): sums them over ranks (fp64), rounds this rank's slice to
    // fp32 (kept in `last`'s own memory when given: its other values are left as they were), clips
    // by the global norm (torch.nn.utils.clip_grad_norm_ when max_grad_norm > 0), updates this
    // rank's slice of the parameters and all-gathers them (equal on all ranks afterwards).
    // Returns the norm before clipping and drops the accumulators.
    absl::StatusOr<double> step(ParamSet* last, const AdamWHyper& hyper, double max_grad_norm);

    int64_t adam_step() const { return adam_.step; }
    void set_adam_step(int64_t step) { adam_.step = step; }
    // Group sizes (elements, unpadded): a checkpoint's layout, checked on load.
    std::vector<int64_t> group_sizes() const;
    // This rank's shard (master, m, v of every group) as one safetensors file, streamed.
    absl::Status save_shard(const std::string& path) const;
    // Loads from the shard files saved by ranks 0..W-1 (any world size W), then all-gathers
    // into the parameters. InvalidArgument when the layout differs from this model's.
    absl::Status load(const std::vector<std::string>& rank_files);
    // The checkpoint reader and writer over the above (this optimizer must outlive it).
    ShardedStateIo state_io();

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
    // Calls fn(member, first element in it, count, flat index) for every piece of `set`'s
    // tensors that falls in the group's flat range [lo, hi).
    template <typename Fn>
    static void for_each_piece(const Group& g, int64_t lo, int64_t hi, Fn&& fn);
    // This rank's reduced gradient slice of every group: in `last` or in scratch (filled by step).
    absl::StatusOr<double> reduce_group(size_t gi, ParamSet* last, std::vector<float>& scratch);
    absl::Status gather_params();

    Communicator* comm_ = nullptr;
    ParamSet* params_ = nullptr;
    std::vector<Group> groups_;
    std::vector<std::vector<double>> acc_;  // per group, world * shard; empty between steps
    AdamWState adam_;                       // moments by group name, {shard} each
};

}  // namespace deltatune
