// FSDP/ZeRO-3 for the GPU model: the parameter source (model/gpu_param_layout.h) that keeps only
// this rank's shard of every unit (embedding, each decoder layer, head) and gathers whole units
// over NCCL when the model acquires them.
//
// Per rank: the bf16 shard, fp32 master shard, AdamW moments and fp32 gradient shard of every
// unit (each unit padded to a multiple of world_size * 128 elements), plus the replicated
// fp32-read GDN weights (gradients all-reduced; every rank applies the same update). Acquiring a
// unit waits for its all-gather (bf16, on the communication stream) and starts the next unit's
// all-gather in the step's order, so communication overlaps the current unit's compute; releasing
// it in the backward reduce-scatters its fp32 gradient (sum over ranks) into the local shard and
// frees the gathered buffers. Streams are ordered with events only; the host waits
// only in synchronize() and step(), both polling NCCL so a dead peer ends in DeadlineExceeded.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/device/device_context.h"
#include "runtime/device/pinned_staging.h"
#include "runtime/distributed/nccl_communicator.h"
#include "runtime/model/gpu_param_layout.h"
#include "runtime/model/gpu_param_store.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

class FsdpGpuParams final : public GpuParamSource, public GpuParamStore {
  public:
    // Shards of the parameters of make_qwen35_params(config, config.tie_word_embeddings),
    // zero until init_random() or load(). `dev` and `comm` must outlive this object. `frozen`
    // (the base under a LoRA adapter): bf16 shards only, no fp32 master, gradient or moments;
    // units are gathered as usual but hand out no gradient, and everything that reads or
    // trains the masters (download, checkpoints, zero_grads, step) is FailedPrecondition.
    static absl::StatusOr<std::unique_ptr<FsdpGpuParams>> create(DeviceContext& dev,
                                                                 NcclCommunicator& comm,
                                                                 const Qwen35Config& config,
                                                                 bool frozen = false);
    bool frozen() const { return frozen_; }
    ~FsdpGpuParams() override;

    const GpuParamLayout& layout() const { return layout_; }
    // The values Qwen35GpuModel::create_random gives the same seed, generated shard by shard.
    absl::Status init_random(uint64_t seed);
    // This rank's shard of `params` (the full fp32 values, the same on every rank).
    absl::Status load(const ParamSet& params);
    // This rank's shard straight from a checkpoint's files (fsdp_gpu_stream.cc): only the byte
    // ranges it holds, in their stored dtype, through pinned staging buffers of `staging_bytes`,
    // converted on the device (to the fp32 masters; a frozen base's bf16 kept as it is). Host
    // memory: the staging buffers, whatever the model's size.
    absl::Status load_from(const CheckpointWeights& weights, size_t staging_bytes = 64ull << 20);
    // An export's source, one parameter at a time (fsdp_gpu_stream.cc). Collective: every rank
    // calls write_param for every parameter in ParamSet order; the unit holding it is gathered
    // (fp32, one unit at a time, on the device), converted to `dtype` there and handed to
    // `write` (rank 0 writes; the others may pass a sink that discards) in staging-sized pieces.
    struct ExportCursor {
        DeviceMemory unit, converted;  // the gathered fp32 unit; one piece in the stored dtype
        int gathered = -1;
        std::unique_ptr<PinnedStaging> staging;
    };
    absl::Status write_param(ExportCursor& cursor, size_t param, DType dtype,
                             const SafetensorsWrite& write, size_t staging_bytes = 64ull << 20);
    // Collective: all fp32 masters into `params` (same names and shapes) on every rank.
    absl::Status download(ParamSet& params);
    // Collective: every `stride`-th element of every parameter's fp32 master, parameters in
    // sample_order().
    absl::StatusOr<std::vector<float>> download_sample(int64_t stride);
    // ParamSet indices unit by unit (each unit's sharded tensors), then the replicated tensors.
    std::vector<size_t> sample_order() const;

    // Sharded checkpoints (fsdp_gpu_checkpoint.cc). save_shard writes this rank's fp32 masters and
    // AdamW moments, per unit "master|m|v.unit.U" (the rank's slice of the unit's padded flat
    // segment) and the replicated segment "master|m|v.replicated", as one safetensors file.
    // load_shards reads the files saved by ranks 0..W-1 of any world size W (a unit's flat
    // segment does not depend on it, only its padding), takes this rank's slice and refreshes
    // the bf16 shards. InvalidArgument when a file's layout is not this model's.
    absl::Status save_shard(const std::string& path);
    absl::Status load_shards(const std::vector<std::string>& rank_files);
    // Element counts of the units and of the replicated segment: the checkpoint layout.
    std::vector<int64_t> group_sizes() const;

    absl::Status zero_grads();
    // World size 1 (every unit whole in this rank's buffers): zeroes the gradients of the
    // parameters `skip` does not mark (by parameter index) and the replicated ones; the marked
    // are left to whatever writes them first (Qwen35GpuModel::mark_gemm_gradients_fresh).
    absl::Status zero_grads_except(const std::vector<char>& skip);
    // World size 1: zeroes the gradients of these parameters.
    absl::Status zero_param_grads(const std::vector<size_t>& params);
    // Gradient accumulation without extra communication: while off, releasing a unit in the
    // backward keeps its unsharded fp32 gradient (accumulating over micro-batches) instead of
    // reduce-scattering it; turn it on for the step's last micro-batch. Costs the full fp32
    // gradients in memory while off.
    void set_gradient_sync(bool on) { sync_grads_ = on; }
    // GpuParamStore: this rank's shard of the units (sharded; with the embedding's row mask when
    // tracked) and the replicated segment; the update follows the last reduce-scatters.
    absl::StatusOr<std::vector<GpuOptimizerGroup>> optimizer_groups() override;
    absl::Status prepare_update() override;
    void attach_deferred_rows(DeferredRowUpdates* deferred) override { deferred_ = deferred; }
    // Collective sum of host values (loss sums, label counts) over ranks, through the device, in
    // fp64 (NcclHostCommunicator).
    absl::Status all_reduce_host(std::vector<double>& values);

    // GpuParamSource.
    absl::StatusOr<GpuUnitPtrs> acquire(int unit, Phase phase, bool grads) override;
    absl::Status release(int unit, Phase phase) override;
    absl::Status synchronize() override;
    // sorted_ids null: every row (adamw_catch_up_rows).
    absl::Status refresh_embedding_rows(const int32_t* sorted_ids, int64_t n) override;

    // Whether the embedding gradient's rows are tracked (world size 1, untied): the norm skips
    // the rows no token touched, the optimizer defers their (zero-gradient) updates until a
    // forward reads them or the masters are read, and zero_grads_except zeroes only the touched
    // ones.
    bool tracks_embedding_rows() const { return embed_slot_ >= 0; }
    // Sizes, elements: this rank's shard of the units and the replicated segment.
    int64_t shard_numel() const { return shard_total_; }
    int64_t replicated_numel() const { return layout_.replicated_numel; }
    // Bytes this rank receives in the all-gathers and sends in the reduce-scatters of one step
    // (forward and backward gathers of the embedding and every layer, the head's once).
    int64_t comm_bytes_per_step() const;

  private:
    struct Unit {
        int64_t padded = 0, shard = 0;  // elements: the unit padded, one rank's shard
        int64_t shard_begin = 0;        // into the local shard buffers
        DeviceMemory gathered;          // bf16 (padded), allocated on the comm stream
        DeviceMemory full_grad;         // fp32 (padded), allocated on the comm stream
        cudaEvent_t ready = nullptr;    // the gather (and gradient zeroing) done, on comm
        bool live = false;              // a gather is enqueued and its buffer held
    };
    FsdpGpuParams(DeviceContext& dev, NcclCommunicator& comm) : dev_(dev), comm_(comm) {}
    cudaStream_t compute() const { return dev_.compute_stream(); }
    cudaStream_t comm_stream() const { return dev_.comm_stream(); }
    absl::Status order(cudaStream_t from, cudaStream_t to);  // `to` waits for `from` so far
    absl::Status gather(int unit);
    GpuUnitPtrs whole_unit(const Unit& u);
    // Zeroes the sharded gradient ranges of the parameters `zero` marks, neighbours (and the
    // padding between them) in one memset.
    absl::Status zero_marked_grads(const std::vector<char>& zero);
    int next_unit(int unit, Phase phase) const;
    absl::Status track_embedding_rows();  // world size 1, untied: see embed_mask_
    // Every deferred embedding update applied (before the masters or moments are read), or
    // dropped (after they are overwritten).
    absl::Status catch_up_embedding();
    absl::Status reset_embedding_deferral();
    absl::Status require_trained(const char* what) const;  // FailedPrecondition when frozen
    struct LocalPiece {
        size_t param;
        int64_t first, last;  // elements of the parameter
        float* master;        // where they go: the fp32 master, or (frozen) the bf16 shard
        __nv_bfloat16* half;
    };
    std::vector<LocalPiece> local_pieces();
    // The fp32 values of unit `unit` whole (every rank's shard) in cursor.unit.
    absl::Status gather_master(ExportCursor& cursor, int unit);
    absl::Status for_each_local_piece(
        const std::function<cudaError_t(size_t, int64_t, int64_t, float*)>& fn);
    absl::Status refresh_half_from_masters();

    DeviceContext& dev_;
    NcclCommunicator& comm_;
    Qwen35Config config_;
    GpuParamLayout layout_;
    std::vector<Unit> units_;
    std::vector<std::string> names_;  // per ParamSet index, for the init rules
    bool sync_grads_ = true;
    bool frozen_ = false;
    int64_t shard_total_ = 0;
    DeviceMemory master_, half_, grad_, moments_;                  // local shards (moments: m | v)
    DeviceMemory rep_master_, rep_half_, rep_grad_, rep_moments_;  // replicated segment
    // World size 1, untied: the embedding gradient's rows that may be nonzero (one byte per
    // vocabulary row, set by the model's embedding backward) and where they lie in grad_.
    DeviceMemory embed_rows_;
    RowMask embed_mask_;
    int embed_slot_ = -1;                     // its ParamSet index, -1 when not tracked
    DeferredRowUpdates* deferred_ = nullptr;  // the optimizer's, while one is attached
    cudaEvent_t scratch_ = nullptr;
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
