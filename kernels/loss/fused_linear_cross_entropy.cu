// Fused linear cross-entropy: per chunk of tokens, three cuBLAS GEMMs around one row kernel
// that does the fp32 online softmax and turns the chunk's bf16 logits into bf16 dlogits in place.
#include "kernels/common/cuda_utils.cuh"
#include "kernels/loss/cross_entropy.h"
#include "kernels/loss/fused_linear_cross_entropy.h"

namespace deltatune {

namespace {

constexpr int kThreads = 1024;

constexpr float kLog2e = 1.4426950408889634f;

// exp(x - m) as 2^(x log2 e - m log2 e) with `ml` = m log2 e: one FMA and the hardware exp2
// (2 ulp, relative error about 1e-6 for the softmax's arguments, below the bf16 dlogits' step)
// instead of expf's range reduction: the row kernel is bound by these exponentials.
__device__ __forceinline__ float exp_shifted(float x, float ml) {
    return exp2f(fmaf(x, kLog2e, -ml));
}

// Online (max, sum of exp(x - max)) pair; combine is associative up to rounding.
struct SoftmaxState {
    float m = -INFINITY;
    float s = 0.0f;
};

// Adds n values: their max first, one rescale of the sum when it grows, then their exponentials.
template <int N>
__device__ __forceinline__ void softmax_add(SoftmaxState& st, const float (&f)[N]) {
    float m = st.m;
#pragma unroll
    for (int i = 0; i < N; ++i) m = fmaxf(m, f[i]);
    if (m > st.m) {
        st.s *= exp_shifted(st.m, m * kLog2e);  // exp2(-inf) = 0 on the first values
        st.m = m;
    }
    const float ml = st.m * kLog2e;
#pragma unroll
    for (int i = 0; i < N; ++i) st.s += exp_shifted(f[i], ml);
}

// kernels

// One block per row of the chunk. Writes row_losses, lse, and dlogits over the logits.
__global__ void cross_entropy_rows_kernel(__nv_bfloat16* logits, float* row_losses, float* lse,
                                          const int32_t* targets, int64_t vocab, float grad_scale,
                                          bool vec) {
    __shared__ float scratch[32];
    const int64_t r = blockIdx.x;
    __nv_bfloat16* row = logits + r * vocab;
    SoftmaxState st;
    if (vec) {
        for (int64_t c = static_cast<int64_t>(threadIdx.x) * 8; c < vocab; c += blockDim.x * 8) {
            float f[8];
            cuda::load8(row + c, f);
            softmax_add(st, f);
        }
    } else {
        for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
            const float f[1] = {__bfloat162float(row[c])};
            softmax_add(st, f);
        }
    }
    const float m = cuda::block_max(st.m, scratch);
    const float s =
        cuda::block_sum(st.m == -INFINITY ? 0.0f : st.s * exp_shifted(st.m, m * kLog2e), scratch);
    const float row_lse = m + logf(s);
    const float lse_l2 = row_lse * kLog2e;
    const int32_t target = targets[r];
    const bool ignored = target == kIgnoreIndex;
    if (threadIdx.x == 0) {
        row_losses[r] = ignored ? 0.0f : row_lse - __bfloat162float(row[target]);
        if (lse) lse[r] = row_lse;
    }
    __syncthreads();  // the target logit is read above before any thread overwrites it
    const float scale = ignored ? 0.0f : grad_scale;
    if (vec) {
        for (int64_t c = static_cast<int64_t>(threadIdx.x) * 8; c < vocab; c += blockDim.x * 8) {
            float f[8];
            cuda::load8(row + c, f);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                f[i] = scale * (exp_shifted(f[i], lse_l2) - (c + i == target ? 1.0f : 0.0f));
            }
            cuda::store8(row + c, f);
        }
    } else {
        for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
            const float f = __bfloat162float(row[c]);
            row[c] =
                __float2bfloat16_rn(scale * (exp_shifted(f, lse_l2) - (c == target ? 1.0f : 0.0f)));
        }
    }
}

__global__ void loss_sum_kernel(float* loss, const float* row_losses, int64_t tokens,
                                float grad_scale) {
    __shared__ float scratch[32];
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < tokens; i += blockDim.x) s += row_losses[i];
    s = cuda::block_sum(s, scratch);
    if (threadIdx.x == 0) *loss = s * grad_scale;
}

cudaError_t blas_error(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

}  // namespace

// launchers

bool fused_linear_cross_entropy_supported(const FusedLinearCrossEntropyArgs& a) {
    const int64_t int_max = (int64_t{1} << 31) - 1;
    return a.row_losses && a.x && a.w && a.targets && a.tokens >= 0 && a.hidden > 0 &&
           a.vocab > 0 && a.chunk_tokens > 0 && a.hidden <= int_max && a.vocab <= int_max &&
           a.chunk_tokens * a.vocab <= (int64_t{1} << 40);
}

size_t fused_linear_cross_entropy_workspace_bytes(const FusedLinearCrossEntropyArgs& a) {
    const int64_t rows = a.chunk_tokens < a.tokens ? a.chunk_tokens : a.tokens;
    return sizeof(__nv_bfloat16) * static_cast<size_t>(rows > 0 ? rows : 1) *
           static_cast<size_t>(a.vocab);
}

cudaError_t fused_linear_cross_entropy(const FusedLinearCrossEntropyArgs& a, cublasHandle_t blas,
                                       void* workspace, size_t workspace_bytes,
                                       cudaStream_t stream) {
    if (!fused_linear_cross_entropy_supported(a)) return cudaErrorInvalidValue;
    if (workspace_bytes < fused_linear_cross_entropy_workspace_bytes(a)) {
        return cudaErrorInvalidValue;
    }
    if (cudaError_t e = blas_error(cublasSetStream(blas, stream)); e != cudaSuccess) return e;
    auto* logits = static_cast<__nv_bfloat16*>(workspace);
    const int h = static_cast<int>(a.hidden);
    const int v = static_cast<int>(a.vocab);
    const bool vec = a.vocab % 8 == 0 && cuda::aligned16(logits);
    const float one = 1.0f;
    const float zero = 0.0f;
    if (a.dw && a.dw_fresh && a.tokens == 0) {  // no chunk to write it: a fresh dW is zero
        if (cudaError_t e = cudaMemsetAsync(a.dw, 0, sizeof(float) * a.vocab * a.hidden, stream);
            e != cudaSuccess) {
            return e;
        }
    }
    for (int64_t t0 = 0; t0 < a.tokens; t0 += a.chunk_tokens) {
        const int rows =
            static_cast<int>(a.tokens - t0 < a.chunk_tokens ? a.tokens - t0 : a.chunk_tokens);
        const __nv_bfloat16* xc = a.x + t0 * a.hidden;
        // Column-major view: logits^T (V x rows) = W (as H x V, transposed) * X_c^T (H x rows).
        if (cudaError_t e =
                blas_error(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, v, rows, h, &one, a.w,
                                        CUDA_R_16BF, h, xc, CUDA_R_16BF, h, &zero, logits,
                                        CUDA_R_16BF, v, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            e != cudaSuccess) {
            return e;
        }
        cross_entropy_rows_kernel<<<rows, kThreads, 0, stream>>>(
            logits, a.row_losses + t0, a.lse ? a.lse + t0 : nullptr, a.targets + t0, a.vocab,
            a.grad_scale, vec);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
        if (a.dx) {
            // dX_c^T (H x rows) = W^T (H x V) * dlogits^T (V x rows).
            if (cudaError_t e = blas_error(
                    cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, h, rows, v, &one, a.w, CUDA_R_16BF,
                                 h, logits, CUDA_R_16BF, v, &zero, a.dx + t0 * a.hidden,
                                 CUDA_R_16BF, h, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                e != cudaSuccess) {
                return e;
            }
        }
        if (a.dw) {
            // dW^T (H x V) += X_c^T (H x rows) * dlogits (rows x V); = for a fresh dW's first.
            const float* beta = a.dw_fresh && t0 == 0 ? &zero : &one;
            if (cudaError_t e = blas_error(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, h, v, rows,
                                                        &one, xc, CUDA_R_16BF, h, logits,
                                                        CUDA_R_16BF, v, beta, a.dw, CUDA_R_32F, h,
                                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                e != cudaSuccess) {
                return e;
            }
        }
    }
    if (a.loss) {
        loss_sum_kernel<<<1, kThreads, 0, stream>>>(a.loss, a.row_losses, a.tokens, a.grad_scale);
        return cudaGetLastError();
    }
    return cudaSuccess;
}

}  // namespace deltatune
