// Varlen depthwise causal conv1d + SiLU over packed documents, forward and backward. A block
// covers kTile tokens x kThreads * V channels, V consecutive channels per thread (one 8-byte load
// of 4 bf16 where the channel count and the pointers' alignment allow, else 1), token-major so
// a warp's accesses are consecutive. The taps of token t reach back to its document's start and no
// further (looked up once per tile by binary search in cu_seqlens). The backward recomputes the
// pre-activation, keeps the last K pre-activation gradients in registers to write dx K-1 tokens
// behind, and writes one row of dw partials per token tile for the deterministic column reduction.
// Tiles inside one document (most of them) take a fast path without per-token tests.
#include "kernels/gdn/causal_conv1d.h"

#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/varlen.cuh"

namespace deltatune {

namespace {

constexpr int kTile = 64;      // tokens per block
constexpr int kThreads = 128;  // threads per block
constexpr int kMaxKernel = 4;  // Qwen3.5 uses 4
constexpr int kGroup = 8;      // tokens whose loads a thread issues together
constexpr int kEdgeGroup = 4;  // the same in the backward's tiles at document starts and the end

__device__ __forceinline__ float bf(const __nv_bfloat16* p, int64_t i) {
    return __bfloat162float(p[i]);
}

// V consecutive bf16 values as one load (V = 1 or 4).
template <int V>
using Raw = std::conditional_t<V == 4, uint2, __nv_bfloat16>;

template <int V>
__device__ __forceinline__ Raw<V> load_raw(const __nv_bfloat16* p, int64_t i) {
    return *reinterpret_cast<const Raw<V>*>(p + i);
}

__device__ __forceinline__ void unpack(const __nv_bfloat16& raw, float (&f)[1]) {
    f[0] = __bfloat162float(raw);
}
__device__ __forceinline__ void unpack(const uint2& raw, float (&f)[4]) {
    cuda::unpack4(raw, f);
}

// begin[i] = the start of token t0 + i's document (tokens past the end: `tokens`).
__device__ __forceinline__ void document_starts(int32_t* begin, int span, const int32_t* cu,
                                                int64_t num_docs, int32_t t0, int32_t tokens) {
    for (int i = threadIdx.x; i < span; i += blockDim.x) {
        begin[i] = t0 + i < tokens ? cu[cuda::doc_of(cu, num_docs, t0 + i)] : tokens;
    }
    __syncthreads();
}

// The taps of V channels from c, and the K-1 inputs before t0 (hist[j] = x[t - (K-1) + j]).
template <int K, int V>
__device__ __forceinline__ void load_taps(float (&wk)[K][V], float (&hist)[K][V],
                                          const __nv_bfloat16* x, const __nv_bfloat16* w,
                                          int32_t t0, int64_t c, int64_t channels) {
#pragma unroll
    for (int j = 0; j < K; ++j) {
#pragma unroll
        for (int v = 0; v < V; ++v) wk[j][v] = bf(w, (c + v) * K + j);
    }
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
        const int32_t s = t0 - (K - 1) + j;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            hist[j][v] = s >= 0 ? bf(x, static_cast<int64_t>(s) * channels + c + v) : 0.0f;
        }
    }
}

// The pre-activation of channel v at token t, whose document starts at b (taps before b skipped).
template <int K, int V>
__device__ __forceinline__ float preactivation(const float (&wk)[K][V], const float (&hist)[K][V],
                                               int v, int32_t t, int32_t b) {
    float pre = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
        if (t - (K - 1) + j >= b) pre += wk[j][v] * hist[j][v];
    }
    return pre;
}

// The same where the window lies inside the document (no tap skipped): the same sum, without the
// per-tap tests. Whether a token's window does is the same for every thread of a block.
template <int K, int V>
__device__ __forceinline__ float preactivation(const float (&wk)[K][V], const float (&hist)[K][V],
                                               int v) {
    float pre = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) pre += wk[j][v] * hist[j][v];
    return pre;
}

// Fast division (MUFU.RCP and a multiply, within 2 ulp): the IEEE one is five instructions more
// and a slow-path test per element. A huge denominator gives 0, the limit.
__device__ __forceinline__ float silu(float pre) {
    return __fdividef(pre, 1.0f + __expf(-pre));
}

// The pre-activation's gradient from the output's.
__device__ __forceinline__ float silu_backward(float dout, float pre) {
    const float sig = __fdividef(1.0f, 1.0f + __expf(-pre));
    return dout * sig * (1.0f + pre * (1.0f - sig));
}

// dwk[j] += d * hist[j] over the taps at or after b (every tap without t and b), channel v.
template <int K, int V>
__device__ __forceinline__ void add_taps(float (&dwk)[K][V], float d, const float (&hist)[K][V],
                                         int v) {
#pragma unroll
    for (int j = 0; j < K; ++j) dwk[j][v] += d * hist[j][v];
}
template <int K, int V>
__device__ __forceinline__ void add_taps(float (&dwk)[K][V], float d, const float (&hist)[K][V],
                                         int v, int32_t t, int32_t b) {
#pragma unroll
    for (int j = 0; j < K; ++j) {
        if (t - (K - 1) + j >= b) dwk[j][v] += d * hist[j][v];
    }
}

template <int K, int V>
__device__ __forceinline__ void shift(float (&a)[K][V]) {
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
#pragma unroll
        for (int v = 0; v < V; ++v) a[j][v] = a[j + 1][v];
    }
}

// The ring of the fast paths below: token i's x in slot i % K, seeded with the K-1 tokens before
// the tile (hist[j] is token j - (K-1)).
template <int K, int V>
__device__ __forceinline__ void ring_from_hist(float (&xs)[K][V], const float (&hist)[K][V]) {
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
#pragma unroll
        for (int v = 0; v < V; ++v) xs[(j + 1) % K][v] = hist[j][v];
    }
}

// The pre-activation of channel v at token u of a fast-path group (u unrolled, so the slots are
// fixed): tap j reads token u - (K-1) + j, ring slot (u + 1 + j) % K; the general path's order.
template <int K, int V>
__device__ __forceinline__ float ring_preactivation(const float (&wk)[K][V],
                                                    const float (&xs)[K][V], int v, int u) {
    float pre = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) pre += wk[j][v] * xs[(u + 1 + j) % K][v];
    return pre;
}

// The forward's fast path (a tile inside the batch and inside one document that starts at least
// K-1 tokens before it): kN tokens from offset n, i0 % K == 0, the sums in the general path's
// order.
template <int K, int V, int kN>
__device__ __forceinline__ void forward_group_fast(float (&xs)[K][V], const float (&wk)[K][V],
                                                   __nv_bfloat16* out, const __nv_bfloat16* x,
                                                   int64_t n, int64_t channels) {
    Raw<V> xr[kN];
#pragma unroll
    for (int u = 0; u < kN; ++u) xr[u] = load_raw<V>(x, n + u * channels);
#pragma unroll
    for (int u = 0; u < kN; ++u) {
        unpack(xr[u], xs[u % K]);
        float o[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float pre = ring_preactivation(wk, xs, v, u);
            o[v] = silu(pre);
        }
        cuda::store_vec(out + n + u * channels, o);
    }
}

// kernels

template <int K, int V>
__global__ void causal_conv1d_forward_kernel(__nv_bfloat16* __restrict__ out,
                                             const __nv_bfloat16* __restrict__ x,
                                             const __nv_bfloat16* __restrict__ w, const int32_t* cu,
                                             int64_t num_docs, int32_t tokens, int64_t channels) {
    __shared__ int32_t begin[kTile];
    const int32_t t0 = blockIdx.x * kTile;
    document_starts(begin, kTile, cu, num_docs, t0, tokens);
    const int64_t c = (static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x) * V;
    if (c >= channels) return;
    float wk[K][V], hist[K][V];
    load_taps(wk, hist, x, w, t0, c, channels);
    if constexpr (kGroup % K == 0) {  // the fast path's ring needs groups of a multiple of K
        if (begin[kTile - 1] <= t0 - (K - 1)) {
            float xs[K][V];
            ring_from_hist(xs, hist);
            const int64_t n0 = static_cast<int64_t>(t0) * channels + c;
            for (int i0 = 0; i0 < kTile; i0 += kGroup) {
                forward_group_fast<K, V, kGroup>(xs, wk, out, x, n0 + i0 * channels, channels);
            }
            return;
        }
    }
    const int32_t t_end = min(tokens, t0 + kTile);
    for (int32_t g0 = t0; g0 < t_end; g0 += kGroup) {
        // The group's loads first, all in flight together (see the backward).
        Raw<V> xr[kGroup];
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
            const int32_t t = g0 + u;
            xr[u] = t < t_end ? load_raw<V>(x, static_cast<int64_t>(t) * channels + c) : Raw<V>{};
        }
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
            const int32_t t = g0 + u;
            if (t >= t_end) break;
            unpack(xr[u], hist[K - 1]);
            const int32_t b = begin[t - t0];
            float o[V];
            if (b <= t - (K - 1)) {
#pragma unroll
                for (int v = 0; v < V; ++v) o[v] = silu(preactivation(wk, hist, v));
            } else {
#pragma unroll
                for (int v = 0; v < V; ++v) o[v] = silu(preactivation(wk, hist, v, t, b));
            }
            cuda::store_vec(out + static_cast<int64_t>(t) * channels + c, o);
            shift(hist);
        }
    }
}

// The fast path of the backward, for a tile whose tokens and the K-1 after them lie inside the
// batch and inside one document that starts at least K-1 tokens before the tile: no token needs a
// bounds or document test. Token i's x and pre-activation gradient live in ring slot i % K, so a
// group of tokens starting at a multiple of K indexes its registers at compile time (no shifts).
// kN tokens from `n` (token i0's offset, i0 % K == 0); dx written for group tokens from kDxFrom
// on (token u's dx is that of u - (K-1)); dw taps added where kTaps. The sums run in the general
// path's order: both give the same bits.
template <int K, int V, int kN, int kDxFrom, bool kTaps>
__device__ __forceinline__ void backward_group_fast(float (&xs)[K][V], float (&dp)[K][V],
                                                    float (&dwk)[K][V], const float (&wk)[K][V],
                                                    __nv_bfloat16* dx, const __nv_bfloat16* dout,
                                                    const __nv_bfloat16* x, int64_t n,
                                                    int64_t channels) {
    Raw<V> xr[kN], dr[kN];
#pragma unroll
    for (int u = 0; u < kN; ++u) {
        xr[u] = load_raw<V>(x, n + u * channels);
        dr[u] = load_raw<V>(dout, n + u * channels);
    }
#pragma unroll
    for (int u = 0; u < kN; ++u) {
        unpack(xr[u], xs[u % K]);
        float d[V];
        unpack(dr[u], d);
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float pre = ring_preactivation(wk, xs, v, u);
            d[v] = silu_backward(d[v], pre);
            if constexpr (kTaps) {
#pragma unroll
                for (int j = 0; j < K; ++j) dwk[j][v] += d[v] * xs[(u + 1 + j) % K][v];
            }
            dp[u % K][v] = d[v];
        }
        if (u >= kDxFrom) {  // folded: u is unrolled
            float g[V];
#pragma unroll
            for (int v = 0; v < V; ++v) {
                g[v] = 0.0f;
#pragma unroll
                for (int j = 0; j < K; ++j) g[v] += wk[j][v] * dp[(u - j + K) % K][v];
            }
            cuda::store_vec(dx + n + (u - (K - 1)) * channels, g);
        }
    }
}

template <int K, int V>
__global__ void causal_conv1d_backward_kernel(__nv_bfloat16* __restrict__ dx,
                                              float* __restrict__ dw_partials,
                                              const __nv_bfloat16* __restrict__ dout,
                                              const __nv_bfloat16* __restrict__ x,
                                              const __nv_bfloat16* __restrict__ w,
                                              const int32_t* cu, int64_t num_docs, int32_t tokens,
                                              int64_t channels) {
    constexpr int kSpan = kTile + K - 1;  // dpre is needed K-1 tokens past the tile
    __shared__ int32_t begin[kSpan];
    const int32_t t0 = blockIdx.x * kTile;
    document_starts(begin, kSpan, cu, num_docs, t0, tokens);
    const int64_t c = (static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x) * V;
    if (c >= channels) return;  // no barrier below: each thread touches only its own columns
    float wk[K][V], hist[K][V];
    load_taps(wk, hist, x, w, t0, c, channels);
    float dwk[K][V], dpre[K][V];  // dpre[j]: the pre-activation gradient K-1-j tokens back
#pragma unroll
    for (int j = 0; j < K; ++j) {
#pragma unroll
        for (int v = 0; v < V; ++v) dwk[j][v] = dpre[j][v] = 0.0f;
    }
    float* part = dw_partials + static_cast<int64_t>(blockIdx.x) * channels * K + c * K;
    if constexpr (kGroup % K == 0) {  // as the forward's
        if (begin[kSpan - 1] <= t0 - (K - 1)) {
            static_assert(kTile % kGroup == 0);
            float xs[K][V];
            ring_from_hist(xs, hist);
            const int64_t n0 = static_cast<int64_t>(t0) * channels + c;
            backward_group_fast<K, V, kGroup, K - 1, true>(xs, dpre, dwk, wk, dx, dout, x, n0,
                                                           channels);
            for (int i0 = kGroup; i0 < kTile; i0 += kGroup) {
                backward_group_fast<K, V, kGroup, 0, true>(xs, dpre, dwk, wk, dx, dout, x,
                                                           n0 + i0 * channels, channels);
            }
            if constexpr (K > 1) {
                backward_group_fast<K, V, K - 1, 0, false>(xs, dpre, dwk, wk, dx, dout, x,
                                                           n0 + kTile * channels, channels);
            }
#pragma unroll
            for (int v = 0; v < V; ++v) {
#pragma unroll
                for (int j = 0; j < K; ++j) part[v * K + j] = dwk[j][v];
            }
            return;
        }
    }
    const int32_t t_end = min(tokens, t0 + kTile);
    for (int i0 = 0; i0 < kSpan; i0 += kEdgeGroup) {
        // The group's loads first, all in flight together (a thread walks its channels token by
        // token; one load at a time would wait out every load's latency).
        Raw<V> xr[kEdgeGroup], dr[kEdgeGroup];
#pragma unroll
        for (int u = 0; u < kEdgeGroup; ++u) {
            const int32_t t = t0 + i0 + u;
            const bool in = i0 + u < kSpan && t < tokens;
            const int64_t n = static_cast<int64_t>(t) * channels + c;
            xr[u] = in ? load_raw<V>(x, n) : Raw<V>{};
            dr[u] = in ? load_raw<V>(dout, n) : Raw<V>{};
        }
#pragma unroll
        for (int u = 0; u < kEdgeGroup; ++u) {
            const int i = i0 + u;
            const int32_t t = t0 + i;
            if (i >= kSpan) break;
            shift(dpre);
            float d[V];
            unpack(dr[u], d);  // zero past the end
            unpack(xr[u], hist[K - 1]);
            if (t < tokens) {
                const int32_t b = begin[i];
                if (b <= t - (K - 1)) {
#pragma unroll
                    for (int v = 0; v < V; ++v) {
                        d[v] = silu_backward(d[v], preactivation(wk, hist, v));
                        if (i < kTile) add_taps(dwk, d[v], hist, v);
                    }
                } else {
#pragma unroll
                    for (int v = 0; v < V; ++v) {
                        d[v] = silu_backward(d[v], preactivation(wk, hist, v, t, b));
                        if (i < kTile) add_taps(dwk, d[v], hist, v, t, b);
                    }
                }
            }
            shift(hist);  // unused from the first token past the end on
#pragma unroll
            for (int v = 0; v < V; ++v) dpre[K - 1][v] = d[v];
            // x[s] feeds pre[s + K-1 - j] through tap j, if that token is in s's document: dx of
            // s = t - (K-1) has every term now. All of them when t is in s's document.
            const int32_t s = t - (K - 1);
            if (s < t0 || s >= t_end) continue;
            float g[V];
            if (t < tokens && begin[i] <= s) {  // s through t in one document: every tap
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    g[v] = 0.0f;
#pragma unroll
                    for (int j = 0; j < K; ++j) g[v] += wk[j][v] * dpre[K - 1 - j][v];
                }
            } else {
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    g[v] = 0.0f;
#pragma unroll
                    for (int j = 0; j < K; ++j) {
                        const int32_t tp = s + (K - 1) - j;
                        if (tp < tokens && begin[tp - t0] <= s)
                            g[v] += wk[j][v] * dpre[K - 1 - j][v];
                    }
                }
            }
            cuda::store_vec(dx + static_cast<int64_t>(s) * channels + c, g);
        }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
#pragma unroll
        for (int j = 0; j < K; ++j) part[v * K + j] = dwk[j][v];
    }
}

int64_t token_tiles(int64_t tokens) {
    return (tokens + kTile - 1) / kTile;
}

template <int V>
dim3 grid_of(int64_t tokens, int64_t channels) {
    return dim3(static_cast<unsigned>(token_tiles(tokens)),
                static_cast<unsigned>((channels / V + kThreads - 1) / kThreads));
}

template <int K>
cudaError_t launch_forward(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w,
                           const int32_t* cu, int64_t num_docs, int64_t tokens, int64_t channels,
                           cudaStream_t stream) {
    const auto t32 = static_cast<int32_t>(tokens);
    if (cuda::vectorizable<4>(channels, {out, x})) {  // else 1 channel per thread
        causal_conv1d_forward_kernel<K, 4><<<grid_of<4>(tokens, channels), kThreads, 0, stream>>>(
            out, x, w, cu, num_docs, t32, channels);
    } else {
        causal_conv1d_forward_kernel<K, 1><<<grid_of<1>(tokens, channels), kThreads, 0, stream>>>(
            out, x, w, cu, num_docs, t32, channels);
    }
    return cudaGetLastError();
}

template <int K>
cudaError_t launch_backward(__nv_bfloat16* dx, float* partials, const __nv_bfloat16* dout,
                            const __nv_bfloat16* x, const __nv_bfloat16* w, const int32_t* cu,
                            int64_t num_docs, int64_t tokens, int64_t channels,
                            cudaStream_t stream) {
    const auto t32 = static_cast<int32_t>(tokens);
    if (cuda::vectorizable<4>(channels, {dx, dout, x})) {
        causal_conv1d_backward_kernel<K, 4><<<grid_of<4>(tokens, channels), kThreads, 0, stream>>>(
            dx, partials, dout, x, w, cu, num_docs, t32, channels);
    } else {
        causal_conv1d_backward_kernel<K, 1><<<grid_of<1>(tokens, channels), kThreads, 0, stream>>>(
            dx, partials, dout, x, w, cu, num_docs, t32, channels);
    }
    return cudaGetLastError();
}

// f(std::integral_constant<int, K>{}) for the kernel size (1..kMaxKernel) given at run time.
template <typename F>
cudaError_t with_kernel_size(int64_t kernel, F&& f) {
    switch (kernel) {
        case 1:
            return f(std::integral_constant<int, 1>{});
        case 2:
            return f(std::integral_constant<int, 2>{});
        case 3:
            return f(std::integral_constant<int, 3>{});
        default:
            return f(std::integral_constant<int, 4>{});
    }
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
    return with_kernel_size(kernel, [&](auto k) {
        return launch_forward<decltype(k)::value>(out, x, w, cu_seqlens, num_docs, tokens, channels,
                                                  stream);
    });
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
    const cudaError_t e = with_kernel_size(kernel, [&](auto k) {
        return launch_backward<decltype(k)::value>(dx, partials, dout, x, w, cu_seqlens, num_docs,
                                                   tokens, channels, stream);
    });
    if (e != cudaSuccess) return e;
    return cuda::column_partials_accumulate(dw, partials, static_cast<int>(token_tiles(tokens)),
                                            static_cast<int>(channels * kernel), stream);
}

}  // namespace deltatune
