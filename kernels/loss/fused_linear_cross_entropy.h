// Fused linear cross-entropy (the LM head and its loss in one op): logits = x W^T are formed a
// chunk of tokens at a time in bf16 (as transformers forms them in the activation dtype), the
// softmax runs in fp32 over each row, the chunk's logits are overwritten in place by
// dlogits = grad_scale * (softmax - onehot(target)), and the chunk's dx and dW contributions are
// two more GEMMs. The full (tokens, vocab) logits never exist. Rows whose target is kIgnoreIndex
// (-100, cross_entropy.h) contribute nothing. GEMMs are cuBLAS (bf16 in, fp32 accumulation).
// The oracle is linear_forward_ref + cross_entropy_{forward,backward}_ref + linear_backward_ref.
// Gradient contract: dx is written (=), dw is accumulated (+=), or written when dw_fresh (the
// first chunk's dW GEMM writes it: no zeroing pass, no read of zeros); either may be null.
#pragma once
#include <cstddef>
#include <cstdint>

#if DELTATUNE_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

#if DELTATUNE_HAVE_CUDA
struct FusedLinearCrossEntropyArgs {
    // Outputs.
    float* loss = nullptr;        // (1) grad_scale * sum of per-row losses (may be null)
    float* row_losses = nullptr;  // (tokens) per-row -log p[target], 0 where ignored (required)
    float* lse = nullptr;         // (tokens) log-sum-exp of each row's logits (may be null)
    __nv_bfloat16* dx = nullptr;  // (tokens, hidden), written
    float* dw = nullptr;          // (vocab, hidden), accumulated (written when dw_fresh)
    bool dw_fresh = false;        // dw holds nothing yet: written, its contents never read
    // Inputs.
    const __nv_bfloat16* x = nullptr;  // (tokens, hidden)
    const __nv_bfloat16* w = nullptr;  // (vocab, hidden), PyTorch layout
    const int32_t* targets = nullptr;  // (tokens)
    int64_t tokens = 0, hidden = 0, vocab = 0;
    float grad_scale = 1.0f;  // e.g. 1 / (number of non-ignored tokens) for the mean loss
    int64_t chunk_tokens = 1024;
};

bool fused_linear_cross_entropy_supported(const FusedLinearCrossEntropyArgs& a);
// Scratch for one chunk's logits: chunk_tokens * vocab bf16.
size_t fused_linear_cross_entropy_workspace_bytes(const FusedLinearCrossEntropyArgs& a);
// Sets `blas`'s stream to `stream`. cuBLAS failures come back as cudaErrorUnknown.
cudaError_t fused_linear_cross_entropy(const FusedLinearCrossEntropyArgs& a, cublasHandle_t blas,
                                       void* workspace, size_t workspace_bytes,
                                       cudaStream_t stream);
#endif

}  // namespace deltatune
