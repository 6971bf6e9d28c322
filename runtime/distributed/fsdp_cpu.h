// FSDP (ZeRO-3) for CPU ranks: the model's parameters, gradients and AdamW moments sharded over
// the ranks, the model's units (model/cpu_param_source.h) gathered one at a time.
//
// Each unit is one flat fp32 segment (its tensors in ParamSet order), padded to a multiple of the
// world size and cut evenly; a rank keeps its shard of the master weights, of the reduced
// gradients and of the moments. The model computes over full-shaped parameter and gradient sets
// whose memory is touched only while a unit is acquired: acquire gathers the unit's values (and
// zeroes its gradients), release in the forward gives their pages back, release in the backward
// sums the unit's gradients over the ranks in fp64 and keeps this rank's slice, then gives both
// back. So a rank holds 16 bytes per parameter / world size plus one unit's values and
// gradients. At world size 1 the full sets are the shards: nothing is gathered or given back.
//
// Gradient accumulation: a step of one micro-batch per rank rounds the fp64 sum to fp32 once; with
// several, fp64 accumulators (8 bytes per parameter / world size) hold the sum until the last, so
// any split of the step's micro-batches over 1, 2 or 3 ranks updates the parameters identically.
// Checkpoints hold one file per rank (master, m and v of every unit, named "embed", "layer.N",
// "head"); loading reassembles them from any world size's files.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/distributed/communicator.h"
#include "runtime/model/cpu_param_source.h"
#include "runtime/model/hf_model_io.h"

namespace deltatune {

class FsdpCpuParams final : public CpuParamSource {
  public:
    // Units in order, and where each parameter lies in them: the checkpoint layout.
    struct Layout {
        std::vector<std::string> names;  // "embed", "layer.0", ..., "head"
        std::vector<int64_t> sizes;      // elements, unpadded (0: a tied model's embedding unit)
        std::vector<size_t> unit;        // per parameter
        std::vector<int64_t> offset;     // per parameter: elements into its unit
    };
    static Layout layout(const ParamSet& params, int64_t num_layers);
    // Elements per rank of a unit of `numel` elements over `world` ranks (the last padded).
    static int64_t shard_size(int64_t numel, int64_t world) { return (numel + world - 1) / world; }

    // `model.params` (values) and `grads` (the same shapes) must outlive the store; at world size
    // above 1 their memory should be untouched (grads made with zero_fill false). This rank's
    // shard is read from the model's files when it was opened without its weights, else copied
    // from model.params, whose pages then go back.
    static absl::StatusOr<std::unique_ptr<FsdpCpuParams>> create(HfModel& model, ParamSet& grads,
                                                                 Communicator& comm);

    absl::Status acquire(int unit, Phase phase) override;
    absl::Status release(int unit, Phase phase) override;

    // Before each micro-batch's backward: whether it is this rank's last of the step.
    void begin_micro_batch(bool last);
    // A micro-batch with nothing to train: the forward's and backward's collectives, with zero
    // gradients, so the ranks stay in step.
    absl::Status join_without_batch();
    // The update (runtime/optim/cpu_update.h: fsdp_cpu_step): begin_update ends the step's
    // micro-batches and returns its 1-based AdamW step; shard_pieces is this rank's shard of the
    // masters, reduced gradients and moments, unit by unit; end_update gives back the gathered
    // values, which the update made stale.
    int64_t begin_update();
    std::vector<CpuUpdatePiece> shard_pieces();
    void end_update();
    Communicator& comm() { return comm_; }

    // Collective: every unit's values present in model.params, until the next step.
    absl::Status gather_all();
    // Collective export source: parameter i's current values in its stored dtype; every rank
    // calls it for every parameter in order (it gathers the parameter's unit).
    ParamBytes param_bytes();

    int64_t adam_step() const { return adam_step_; }
    void set_adam_step(int64_t step) { adam_step_ = step; }
    std::vector<int64_t> group_sizes() const;
    // This rank's shard (master, m, v of every unit) as one safetensors file, streamed.
    absl::Status save_shard(const std::string& path);
    // This rank's shard from the files saved by ranks 0..W-1 (any world size W). InvalidArgument
    // when the layout differs from this model's.
    absl::Status load(const std::vector<std::string>& rank_files);

  private:
    struct Member {
        size_t param = 0;  // index in ParamSet::all()
        int64_t offset = 0;
        int64_t numel = 0;
    };
    struct Unit {
        std::string name;
        std::vector<Member> members;
        int64_t numel = 0;
        int64_t shard = 0;                // elements per rank
        std::vector<float> master, grad;  // this rank's shard (world size above 1)
        std::vector<float> m, v;          // AdamW moments of the shard
        std::vector<double> acc;          // fp64 gradient sum over micro-batches, when several
        bool present = false;             // values gathered into the full set
    };
    FsdpCpuParams(ParamSet& values, ParamSet& grads, Communicator& comm, int64_t num_layers);
    absl::Status load_weights(const CheckpointWeights& weights);
    absl::Status take_shard_from_values();
    // fn(member, first element in it, count, flat index) for each member piece in [lo, hi).
    template <typename Fn>
    static void for_each_member_piece(const Unit& u, int64_t lo, int64_t hi, Fn&& fn);
    // fn(master, grad, count, flat index) over this rank's shard in [lo, hi) (flat, within the
    // shard): one range of the shard vectors, or at world size 1 the member tensors themselves.
    template <typename Fn>
    void for_each_shard_range(Unit& u, int64_t lo, int64_t hi, Fn&& fn);
    absl::Status gather(Unit& u);
    void drop(Unit& u, bool grads_too);
    absl::Status reduce_grads(Unit& u);
    float* value(size_t param) { return values_.all()[param].value.data<float>(); }
    float* grad(size_t param) { return grads_.all()[param].value.data<float>(); }

    ParamSet& values_;
    ParamSet& grads_;
    Communicator& comm_;
    std::vector<Unit> units_;
    std::vector<size_t> unit_of_param_;
    int64_t adam_step_ = 0;
    bool in_step_ = false;       // a micro-batch of the current step has begun
    bool accumulating_ = false;  // this step runs several micro-batches on this rank
    bool last_ = true;           // the current micro-batch is this rank's last of the step
    int exported_unit_ = -1;     // param_bytes: the unit gathered for the export
};

}  // namespace deltatune
