// cuDNN's fused flash attention (SDPA graphs built with the cudnn-frontend API) serving the gated
// attention op of attention.h: same inputs, outputs and gradient contract as
// gated_attention_forward / gated_attention_backward, including the saved lse layout
// (tokens, q_heads). Used both ways with DELTATUNE_ATTENTION=cudnn, where built: faster than the
// handwritten attention_flash.cu, slower than the default wgmma kernels on packed batches
// (tests/bench/attention_bench.cc measures all three; docs/performance.md "Measured choices");
// every core passes kernels_tests' attention case against attention_ref.cc.
//
// Packed documents are cuDNN "ragged" batches: document i is batch slot i, found through element
// offsets computed on the device from cu_seqlens (attention_ragged_offsets), with a padding mask
// from its length and a top-left causal mask, so no document sees another. Plans depend on
// (slots, longest document, tokens) only through power-of-two buckets (shape_of), so a training
// run builds a handful, about 0.1 s each; slots past the documents have length 0.
//
// The backward accumulates dq with atomics inside cuDNN: results can differ in the last bits
// from run to run (the handwritten kernels are bitwise deterministic).
#pragma once
#if DELTATUNE_HAVE_CUDNN_ATTENTION
#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/attention/attention.h"

namespace deltatune {

class CudnnAttention {
  public:
    // A cuDNN handle on the current device (Unavailable when cuDNN cannot load or initialise).
    static absl::StatusOr<std::unique_ptr<CudnnAttention>> create();
    ~CudnnAttention();
    CudnnAttention(const CudnnAttention&) = delete;
    CudnnAttention& operator=(const CudnnAttention&) = delete;

    // Workspace for forward / backward of `a`; builds and caches the plans on first use, so an
    // error here (Unimplemented, with cuDNN's reason) means cuDNN cannot serve this shape.
    // a.max_doc_tokens bounds the longest document (0: unknown, `tokens` is used).
    absl::StatusOr<size_t> forward_workspace_bytes(const GatedAttentionArgs& a);
    absl::StatusOr<size_t> backward_workspace_bytes(const GatedAttentionArgs& a);

    // Outputs as gated_attention_forward / gated_attention_backward; workspace from the calls
    // above (device memory, 256-byte aligned).
    absl::Status forward(__nv_bfloat16* y, __nv_bfloat16* o, float* lse,
                         const GatedAttentionArgs& a, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream);
    absl::Status backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                          __nv_bfloat16* dgate, const __nv_bfloat16* dy, const __nv_bfloat16* o,
                          const float* lse, const GatedAttentionArgs& a, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream);

    // Plans built so far (forward and backward counted separately), the seconds spent building
    // them (one compile per plan).
    int plans_built() const;
    double build_seconds() const;

  private:
    struct Impl;
    explicit CudnnAttention(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace deltatune
#endif
