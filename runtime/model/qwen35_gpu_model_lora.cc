// Qwen35GpuModel under a LoRA adapter: the frozen base's gradient routing and the adapter's
// pairs bound into each layer's projections (gpu_proj.h computes the branch).
#include "runtime/model/qwen35_gpu_model.h"

#if DELTATUNE_HAVE_CUDA
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"
#include "runtime/model/gpu_lora.h"
#include "runtime/model/qwen35_gpu_model_impl.h"

namespace deltatune {

absl::Status Qwen35GpuModel::attach_lora(GpuLoraAdapters& adapters) {
    Impl& m = *impl_;
    if (m.pending) return absl::FailedPreconditionError("attach_lora during a step");
    // The scratch for the gradients the norm and GDN kernels form anyway: every parameter but
    // the projections, the embedding and the LM head (each aligned as in the flat layout).
    m.sink_offset.assign(m.layout.slots.size(), -1);
    int64_t total = 0;
    for (size_t i = 0; i < m.layout.slots.size(); ++i) {
        const int idx = static_cast<int>(i);
        if (m.gemm_grad[i] || idx == m.embed_idx || idx == m.lm_head_idx) continue;
        m.sink_offset[i] = total;
        total += (m.layout.slots[i].numel + kGpuParamAlign - 1) / kGpuParamAlign * kGpuParamAlign;
    }
    DT_ASSIGN_OR_RETURN(m.sink, m.dev.allocate(sizeof(float) * std::max<int64_t>(total, 1)));
    DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.sink.get(), 0, m.sink.bytes(), m.s()));
    std::fill(m.fresh.begin(), m.fresh.end(), 0);
    m.lora = &adapters;
    return absl::OkStatus();
}

void Qwen35GpuModel::Impl::attach_lora_pairs(int64_t l, GpuLayer& g) const {
    const std::pair<GpuParam*, Proj> projections[] = {
        {&g.q_proj, Proj::kQ},      {&g.k_proj, Proj::kK},        {&g.v_proj, Proj::kV},
        {&g.o_proj, Proj::kO},      {&g.mlp_gate, Proj::kGate},   {&g.mlp_up, Proj::kUp},
        {&g.mlp_down, Proj::kDown}, {&g.in_proj_qkv, Proj::kQkv}, {&g.in_proj_z, Proj::kZ},
        {&g.in_proj_b, Proj::kB},   {&g.in_proj_a, Proj::kA},     {&g.out_proj, Proj::kOut}};
    for (const auto& [p, which] : projections) {
        if (p->w) p->lora = lora->find(l, which);
    }
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
