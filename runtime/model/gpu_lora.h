// LoRA adapters on the GPU (model/lora.h's math): every adapter tensor's fp32 master, bf16 copy
// (what the low-rank GEMMs read), fp32 gradient and AdamW moments, each kind in one flat device
// buffer, so the optimizer's norm and AdamW are one launch each over the whole adapter. The
// adapter is small (rank 16 on every projection of the 27B model: about 0.3% of the base) and
// replicated on every rank: one replicated group (runtime/model/gpu_param_store.h), its gradient
// summed over the ranks by the optimizer.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/device/device_context.h"
#include "runtime/model/gpu_param_store.h"
#include "runtime/model/lora.h"
#include "runtime/model/param_set.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

// The adapted projections of a layer that read the same input (GDN's in_proj_qkv, z, b, a;
// attention's q, k, v; the MLP's gate and up): their A matrices lie back to back, so the branch's
// down projection x A^T of all of them is one GEMM, and so are the input gradient's
// (dy B) A and dA. `xa` holds scale x A^T of every member (tokens x rank columns, ld rank) from
// the forward to the backward; `dyb` collects scale dy B of the members in the backward.
struct GpuLoraGroup {
    const __nv_bfloat16* A = nullptr;  // (rank, in): the members' A stacked
    float* dA = nullptr;
    int64_t rank = 0;  // the members' ranks summed
    int members = 0;
    __nv_bfloat16* xa = nullptr;   // (tokens, rank), set by GpuLoraAdapters::reserve
    __nv_bfloat16* dyb = nullptr;  // (tokens, rank), shared by every group (one at a time)
    // Host bookkeeping of the backward: members whose dy B is in, reset by the forward.
    mutable int pending = 0;
};

// One adapted projection y = x W^T + scale (x A^T) B^T, as the blocks see it.
struct GpuLora {
    const __nv_bfloat16* B = nullptr;  // (out, rank)
    float* dB = nullptr;               // fp32 gradient, accumulated (+=)
    int64_t rank = 0;
    int64_t column = 0;  // its first column in the group's xa and dyb
    bool first = false;  // the group's first member in the forward: computes the group's xa
    float scale = 0;
    GpuLoraGroup* group = nullptr;
};

class GpuLoraAdapters final : public GpuParamStore {
  public:
    // `adapters`: a make_lora_params set for `config` (canonical names, fp32), uploaded as the
    // masters and their bf16 copies; gradients and moments start at zero.
    static absl::StatusOr<std::unique_ptr<GpuLoraAdapters>> create(DeviceContext& dev,
                                                                   const Qwen35Config& config,
                                                                   const ParamSet& adapters,
                                                                   float scale);
    ~GpuLoraAdapters() override;

    // The pair on projection p of layer l; null where the adapter has none.
    const GpuLora* find(int64_t layer, Proj p) const;
    // Room for the branch's saved activations of a `tokens`-token batch (the model calls it
    // before each forward; grows only).
    absl::Status reserve(int64_t tokens);

    int64_t numel() const { return total_; }  // elements of the flat buffers (padded)
    absl::Status zero_grads();
    // GpuParamStore: the flat buffers as one replicated tensor.
    absl::StatusOr<std::vector<GpuOptimizerGroup>> optimizer_groups() override;
    absl::Status prepare_update() override { return absl::OkStatus(); }

    // Host copies by name (the set make_lora_params gives): values, gradients.
    absl::Status download(ParamSet& params) const;
    absl::Status download_grads(ParamSet& grads) const;
    absl::Status upload(const ParamSet& params);  // refreshes the bf16 copies, zeroes nothing
    // Masters and moments as three host vectors of numel() (checkpoints), and back.
    absl::Status save_state(std::vector<float>& master, std::vector<float>& m,
                            std::vector<float>& v) const;
    absl::Status load_state(const std::vector<float>& master, const std::vector<float>& m,
                            const std::vector<float>& v);

  private:
    struct Slot {
        std::string name;
        int64_t offset = 0, numel = 0;
    };
    GpuLoraAdapters(DeviceContext& dev) : dev_(dev) {}
    absl::Status copy_out(const DeviceMemory& from, ParamSet& to) const;
    absl::Status refresh_half();
    // AdamW's v: the second half of moments_ (m | v, each as long as the flat buffers).
    float* second_moment() const {
        return moments_.as<float>() + moments_.bytes() / sizeof(float) / 2;
    }
    void place(const Qwen35Config& config, const ParamSet& adapters, float scale);
    void bind();

    DeviceContext& dev_;
    std::vector<Slot> slots_;                           // in the adapter set's order
    std::vector<std::array<GpuLora, kNumProj>> pairs_;  // per layer
    std::vector<std::unique_ptr<GpuLoraGroup>> groups_;
    // place()'s offsets, for bind(): each group's first A, each pair's B.
    std::vector<std::pair<GpuLoraGroup*, int64_t>> group_at_;
    std::vector<std::pair<GpuLora*, int64_t>> b_at_;
    int64_t capacity_ = 0;  // tokens the activation buffers hold
    DeviceMemory activations_;
    int64_t total_ = 0;
    DeviceMemory master_, half_, grad_, moments_;
};

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
