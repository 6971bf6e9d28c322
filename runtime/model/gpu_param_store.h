// What a GPU parameter store (the flat model, FSDP shards, a LoRA adapter) hands the optimizer
// (runtime/optim/gpu_optimizer.h): its tensors, and whether each group is this rank's share of a
// sharded whole or the same on every rank. The store holds the memory (masters, moments,
// gradients, bf16 copies: checkpoints read them); the optimizer holds every piece of the update's
// math.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/optim/adamw.h"

namespace deltatune {

struct GpuOptimizerGroup {
    // fp32 masters, moments and gradients, bf16 copies (AdamWTensorArgs, chunk_begin unset).
    std::vector<AdamWTensorArgs> tensors;
    // true: this rank's disjoint share of sharded tensors (squared norms summed over ranks);
    // false: the same tensors on every rank (gradients summed over ranks, norm counted once).
    bool sharded = false;
};

// Updates the optimizer owes a store: rows of a tensor marked defer_unmarked that the last steps
// did not touch. The store calls these before anything reads the rows or the masters.
class DeferredRowUpdates {
  public:
    virtual ~DeferredRowUpdates() = default;
    // Brings the rows of `sorted_ids` (device, ascending, repeats allowed; null: every row) up
    // to date, stream-ordered on the compute stream.
    virtual absl::Status catch_up(const int32_t* sorted_ids, int64_t n) = 0;
    // Every row up to date, and nothing owed afterwards.
    virtual absl::Status catch_up_all() = 0;
    // The masters were overwritten (a load): whatever was owed no longer applies.
    virtual absl::Status forget() = 0;
};

class GpuParamStore {
  public:
    virtual ~GpuParamStore() = default;
    // The groups, in the order the update runs them; pointers stay valid for the store's life.
    virtual absl::StatusOr<std::vector<GpuOptimizerGroup>> optimizer_groups() = 0;
    // Stream ordering (or pending gradient work) the update must follow, on the compute stream.
    virtual absl::Status prepare_update() = 0;
    // The optimizer that defers rows registers itself here (null: it went away).
    virtual void attach_deferred_rows(DeferredRowUpdates* deferred) { (void)deferred; }
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
