// Varlen depthwise causal conv1d + SiLU over packed documents, forward and backward. A block
// covers kTile tokens x kThreads channels, one thread per channel, token-major so a warp's
// accesses are consecutive channels. The taps of token t reach back to its document's start and
// no further (looked up once per tile by binary search in cu_seqlens). The backward recomputes
// the pre-activation, writes dx, and writes one row of dw partials per token tile for the
// deterministic column reduction.
#include "kernels/causal_conv1d.h"
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/varlen.cuh"

namespace deltatune {

namespace {

constexpr int kTile = 64;      // tokens per block
constexpr int kThreads = 128;  // channels per block
constexpr int kMaxKernel = 4;  // Qwen3.5 uses 4
constexpr int kGroup = 8;      // tokens whose loads a thread issues together

__device__ __forceinline__ float bf(const __nv_bfloat16* p, int64_t i) {
    return __bfloat162float(p[i]);
}

// kernels

template <int K>
__global__ void causal_conv1d_forward_kernel(__nv_bfloat16* __restrict__ out,
                                             const __nv_bfloat16* __restrict__ x,
                                             const __nv_bfloat16* __restrict__ w, const int32_t* cu,
                                             int64_t num_docs, int32_t tokens, int64_t channels) {
    __shared__ int32_t begin[kTile];
    const int32_t t0 = blockIdx.x * kTile;
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
        begin[i] = t0 + i < tokens ? cu[cuda::doc_of(cu, num_docs, t0 + i)] : tokens;
    }
    __syncthreads();
    const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
    if (c >= channels) return;
    float wk[K];
#pragma unroll
    for (int j = 0; j < K; ++j) wk[j] = bf(w, c * K + j);
    float hist[K];  // hist[j] = x[t - (K-1) + j]
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
        const int32_t s = t0 - (K - 1) + j;
        hist[j] = s >= 0 ? bf(x, static_cast<int64_t>(s) * channels + c) : 0.0f;
    }
    const int32_t t_end = min(tokens, t0 + kTile);
    for (int32_t g0 = t0; g0 < t_end; g0 += kGroup) {
        // The group's loads first, all in flight together (see the backward).
        float xr[kGroup];
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
            const int32_t t = g0 + u;
            xr[u] = t < t_end ? bf(x, static_cast<int64_t>(t) * channels + c) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
            const int32_t t = g0 + u;
            if (t >= t_end) continue;
            hist[K - 1] = xr[u];
            const int32_t b = begin[t - t0];
            float pre = 0.0f;
#pragma unroll
            for (int j = 0; j < K; ++j) {
                if (t - (K - 1) + j >= b) pre += wk[j] * hist[j];
            }
            out[static_cast<int64_t>(t) * channels + c] =
                __float2bfloat16_rn(pre / (1.0f + __expf(-pre)));
#pragma unroll
            for (int j = 0; j < K - 1; ++j) hist[j] = hist[j + 1];
        }
    }
}

template <int K>
__global__ void causal_conv1d_backward_kernel(__nv_bfloat16* __restrict__ dx,
                                              float* __restrict__ dw_partials,
                                              const __nv_bfloat16* __restrict__ dout,
                                              const __nv_bfloat16* __restrict__ x,
                                              const __nv_bfloat16* __restrict__ w,
                                              const int32_t* cu, int64_t num_docs, int32_t tokens,
                                              int64_t channels) {
    constexpr int kSpan = kTile + K - 1;  // dpre is needed K-1 tokens past the tile
    __shared__ int32_t begin[kSpan];
    __shared__ float dpre[kSpan][kThreads];
    const int32_t t0 = blockIdx.x * kTile;
    for (int i = threadIdx.x; i < kSpan; i += blockDim.x) {
        begin[i] = t0 + i < tokens ? cu[cuda::doc_of(cu, num_docs, t0 + i)] : tokens;
    }
    __syncthreads();
    const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
    if (c >= channels) return;  // no barrier below: each thread touches only its own column
    float wk[K];
#pragma unroll
    for (int j = 0; j < K; ++j) wk[j] = bf(w, c * K + j);
    float dwk[K];
#pragma unroll
    for (int j = 0; j < K; ++j) dwk[j] = 0.0f;
    float hist[K];
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
        const int32_t s = t0 - (K - 1) + j;
        hist[j] = s >= 0 ? bf(x, static_cast<int64_t>(s) * channels + c) : 0.0f;
    }
    for (int i0 = 0; i0 < kSpan; i0 += kGroup) {
        // The group's loads first, all in flight together (a thread walks its channel token by
        // token; one load at a time would wait out every load's latency).
        float xr[kGroup], dr[kGroup];
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
            const int32_t t = t0 + i0 + u;
            const bool in = i0 + u < kSpan && t < tokens;
            xr[u] = in ? bf(x, static_cast<int64_t>(t) * channels + c) : 0.0f;
            dr[u] = in ? bf(dout, static_cast<int64_t>(t) * channels + c) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
            const int i = i0 + u;
            const int32_t t = t0 + i;
            if (i >= kSpan) continue;
            float d = 0.0f;
            if (t < tokens) {
                hist[K - 1] = xr[u];
                const int32_t b = begin[i];
                float pre = 0.0f;
#pragma unroll
                for (int j = 0; j < K; ++j) {
                    if (t - (K - 1) + j >= b) pre += wk[j] * hist[j];
                }
                const float sig = 1.0f / (1.0f + __expf(-pre));
                d = dr[u] * sig * (1.0f + pre * (1.0f - sig));
                if (i < kTile) {
#pragma unroll
                    for (int j = 0; j < K; ++j) {
                        if (t - (K - 1) + j >= b) dwk[j] += d * hist[j];
                    }
                }
#pragma unroll
                for (int j = 0; j < K - 1; ++j) hist[j] = hist[j + 1];
            }
            dpre[i][threadIdx.x] = d;
        }
    }
    const int32_t t_end = min(tokens, t0 + kTile);
#pragma unroll 8
    for (int32_t t = t0; t < t_end; ++t) {
        // x[t] feeds pre[t + K-1 - j] through tap j, if that token is in t's document.
        float g = 0.0f;
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int32_t tp = t + (K - 1) - j;
            if (tp < tokens && begin[tp - t0] <= t) g += wk[j] * dpre[tp - t0][threadIdx.x];
        }
        dx[static_cast<int64_t>(t) * channels + c] = __float2bfloat16_rn(g);
    }
    float* part = dw_partials + static_cast<int64_t>(blockIdx.x) * channels * K + c * K;
#pragma unroll
    for (int j = 0; j < K; ++j) part[j] = dwk[j];
}

int64_t token_tiles(int64_t tokens) {
    return (tokens + kTile - 1) / kTile;
}

template <int K>
cudaError_t launch_forward(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w,
                           const int32_t* cu, int64_t num_docs, int64_t tokens, int64_t channels,
                           cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(token_tiles(tokens)),
                    static_cast<unsigned>((channels + kThreads - 1) / kThreads));
    causal_conv1d_forward_kernel<K><<<grid, kThreads, 0, stream>>>(
        out, x, w, cu, num_docs, static_cast<int32_t>(tokens), channels);
    return cudaGetLastError();
}

template <int K>
cudaError_t launch_backward(__nv_bfloat16* dx, float* partials, const __nv_bfloat16* dout,
                            const __nv_bfloat16* x, const __nv_bfloat16* w, const int32_t* cu,
                            int64_t num_docs, int64_t tokens, int64_t channels,
                            cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(token_tiles(tokens)),
                    static_cast<unsigned>((channels + kThreads - 1) / kThreads));
    causal_conv1d_backward_kernel<K><<<grid, kThreads, 0, stream>>>(
        dx, partials, dout, x, w, cu, num_docs, static_cast<int32_t>(tokens), channels);
    return cudaGetLastError();
}

}  // namespace

// launchers

bool causal_conv1d_supported(int64_t tokens, int64_t channels, int64_t kernel) {
    return tokens >= 0 && tokens < (int64_t{1} << 31) && channels > 0 &&
           channels * kernel < (int64_t{1} << 31) && kernel >= 1 && kernel <= kMaxKernel;
}

cudaError_t causal_conv1d_forward(__nv_bfloat16* out, const __nv_bfloat16* x,
                                  const __nv_bfloat16* w, const int32_t* cu_seqlens,
                                  int64_t num_docs, int64_t tokens, int64_t channels,
                                  int64_t kernel, cudaStream_t stream) {
    if (!causal_conv1d_supported(tokens, channels, kernel) || num_docs < 1) {
        return cudaErrorInvalidValue;
    }
    if (tokens == 0) return cudaSuccess;
    switch (kernel) {
        case 1:
            return launch_forward<1>(out, x, w, cu_seqlens, num_docs, tokens, channels, stream);
        case 2:
            return launch_forward<2>(out, x, w, cu_seqlens, num_docs, tokens, channels, stream);
        case 3:
            return launch_forward<3>(out, x, w, cu_seqlens, num_docs, tokens, channels, stream);
        default:
            return launch_forward<4>(out, x, w, cu_seqlens, num_docs, tokens, channels, stream);
    }
}

size_t causal_conv1d_backward_workspace_bytes(int64_t tokens, int64_t channels, int64_t kernel) {
    return sizeof(float) * static_cast<size_t>(token_tiles(tokens) * channels * kernel);
}

cudaError_t causal_conv1d_backward(__nv_bfloat16* dx, float* dw, const __nv_bfloat16* dout,
                                   const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   const int32_t* cu_seqlens, int64_t num_docs, int64_t tokens,
                                   int64_t channels, int64_t kernel, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream) {
    if (!causal_conv1d_supported(tokens, channels, kernel) || num_docs < 1) {
        return cudaErrorInvalidValue;
    }
    if (tokens == 0) return cudaSuccess;
    if (workspace_bytes < causal_conv1d_backward_workspace_bytes(tokens, channels, kernel)) {
        return cudaErrorInvalidValue;
    }
    auto* partials = static_cast<float*>(workspace);
    cudaError_t e;
    switch (kernel) {
        case 1:
            e = launch_backward<1>(dx, partials, dout, x, w, cu_seqlens, num_docs, tokens, channels,
                                   stream);
            break;
        case 2:
            e = launch_backward<2>(dx, partials, dout, x, w, cu_seqlens, num_docs, tokens, channels,
                                   stream);
            break;
        case 3:
            e = launch_backward<3>(dx, partials, dout, x, w, cu_seqlens, num_docs, tokens, channels,
                                   stream);
            break;
        default:
            e = launch_backward<4>(dx, partials, dout, x, w, cu_seqlens, num_docs, tokens, channels,
                                   stream);
    }
    if (e != cudaSuccess) return e;
    return cuda::column_partials_accumulate(dw, partials, static_cast<int>(token_tiles(tokens)),
                                            static_cast<int>(channels * kernel), stream);
}

}  // namespace deltatune
