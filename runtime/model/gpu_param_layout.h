// How the GPU model's parameters are grouped for sharding, and the interface through which the
// model finds them (the model never calls NCCL; runtime/distributed supplies the sharded
// implementation of GpuParamSource, the model itself the single-device one).
//
// Units are what FSDP gathers at once: unit 0 is the embedding, units 1..L the decoder layers,
// unit L+1 the head (final norm and lm_head; with tied embeddings the embedding lives here and
// unit 0 is empty). Each unit's parameters are one flat segment, every tensor starting on a
// 128-element boundary. The GDN weights the kernels read in fp32 (conv1d weight, A_log, dt_bias,
// the gated norm's weight: about 0.01% of a layer) can instead be kept replicated in one flat
// fp32 segment of their own, so a sharded model never needs an fp32 gather.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#endif

namespace deltatune {

inline constexpr int64_t kGpuParamAlign = 128;  // elements: 256-byte bf16, 512-byte fp32

// Elements per rank of a unit of `numel` elements over `world` ranks: the unit padded to a
// multiple of world x kGpuParamAlign and cut evenly (its shard in memory and in checkpoints).
inline int64_t gpu_unit_shard(int64_t numel, int64_t world) {
    const int64_t quantum = world * kGpuParamAlign;
    return (numel + quantum - 1) / quantum * quantum / world;
}

struct GpuParamSlot {
    int unit = 0;
    bool replicated = false;  // in the replicated fp32-read segment rather than the unit's
    int64_t offset = 0;       // elements into the unit's (or the replicated) segment
    int64_t numel = 0;
};

struct GpuParamLayout {
    int num_units = 0;                // num_layers + 2
    bool tied = false;                // the embedding is in the head unit
    std::vector<GpuParamSlot> slots;  // per ParamSet::all() index
    std::vector<int64_t> unit_numel;  // per unit: segment length, elements (tensors aligned)
    int64_t replicated_numel = 0;     // the replicated segment, elements (tensors aligned)
    int head_unit() const { return num_units - 1; }
    int64_t total_unit_numel() const;  // sum of unit_numel
};

// `replicate_fp32_read`: put the fp32-read GDN weights in the replicated segment (sharded
// models); otherwise they stay in their layer's unit (the single-device model).
GpuParamLayout make_gpu_param_layout(const Qwen35Config& config, const ParamSet& params,
                                     bool replicate_fp32_read);

// Device initialisation rule of a parameter by name: init_qwen35_params' distributions.
struct GpuInitRule {
    int kind = 0;  // InitFill (kernels/tensor/init_fill.h)
    float a = 0, b = 0;
};
GpuInitRule gpu_init_rule(const std::string& name, float initializer_range);

#if DELTATUNE_HAVE_CUDA
// Device base pointers of one acquired unit (its segment) and of the replicated segment.
// `master` is null where the source keeps no full fp32 copy of the unit (sharded).
struct GpuUnitPtrs {
    const __nv_bfloat16* half = nullptr;
    const float* master = nullptr;
    float* grad = nullptr;
    const __nv_bfloat16* rep_half = nullptr;
    const float* rep_master = nullptr;
    float* rep_grad = nullptr;
    // Where the source tracks which rows of the embedding's gradient may be nonzero (its unit,
    // untied, whole on this rank): one byte per vocabulary row, which the model sets for each
    // id its embedding backward adds into (kernels/optim/grad_rows.h). Null otherwise.
    uint8_t* embed_rows_touched = nullptr;
};

// Where the model gets its parameters. The model acquires a unit before computing with it and
// releases it after, in the step's order (forward: 0, 1..L, head; backward: head, L..1, 0), all
// on the device context's compute stream. Pointers are valid for compute-stream work enqueued
// between acquire and release. Gradients written there accumulate (+=) into the source's
// gradients once the unit is released in the backward phase; `grads` asks for a gradient
// buffer (the head needs one already in the forward: the fused cross-entropy writes lm_head's).
class GpuParamSource {
  public:
    enum class Phase { kForward, kBackward };
    virtual ~GpuParamSource() = default;
    virtual absl::StatusOr<GpuUnitPtrs> acquire(int unit, Phase phase, bool grads) = 0;
    virtual absl::Status release(int unit, Phase phase) = 0;
    // Waits on the host for the compute stream (the loss read-back). A sharded source polls its
    // communicator instead of blocking, so a dead peer ends in an error, never a hang.
    virtual absl::Status synchronize() = 0;
    // Before the forward reads the embedding rows of these ids (device, ascending, repeats
    // allowed): a source that defers the updates of rows no step touched applies them now.
    virtual absl::Status refresh_embedding_rows(const int32_t* sorted_ids, int64_t n) {
        (void)sorted_ids, (void)n;
        return absl::OkStatus();
    }
};
#endif

}  // namespace deltatune
