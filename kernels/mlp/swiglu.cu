// SwiGLU, forward and backward: elementwise, 16-byte accesses when every pointer allows,
// grid-stride loops, fp32 math.
#include "kernels/common/cuda_utils.cuh"
#include "kernels/mlp/swiglu.h"

namespace deltatune {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// kernels

__global__ void swiglu_forward_kernel(__nv_bfloat16* h, const __nv_bfloat16* gate,
                                      const __nv_bfloat16* up, int64_t n, bool vectorized) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (vectorized) {
        for (int64_t v = i; v < n / 8; v += stride) {
            float g[8], u[8], o[8];
            cuda::load8(gate + 8 * v, g);
            cuda::load8(up + 8 * v, u);
#pragma unroll
            for (int k = 0; k < 8; ++k) o[k] = g[k] * sigmoidf(g[k]) * u[k];
            cuda::store8(h + 8 * v, o);
        }
        i += n / 8 * 8;
    }
    for (; i < n; i += stride) {
        const float g = __bfloat162float(gate[i]);
        h[i] = __float2bfloat16_rn(g * sigmoidf(g) * __bfloat162float(up[i]));
    }
}

__device__ __forceinline__ void swiglu_grad(float dh, float g, float u, float& dg, float& du) {
    const float sig = sigmoidf(g);
    dg = dh * u * sig * (1.0f + g * (1.0f - sig));
    du = dh * g * sig;
}

__global__ void swiglu_backward_kernel(__nv_bfloat16* dgate, __nv_bfloat16* dup,
                                       const __nv_bfloat16* dh, const __nv_bfloat16* gate,
                                       const __nv_bfloat16* up, int64_t n, bool vectorized) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (vectorized) {
        for (int64_t v = i; v < n / 8; v += stride) {
            float d[8], g[8], u[8], dg[8], du[8];
            cuda::load8(dh + 8 * v, d);
            cuda::load8(gate + 8 * v, g);
            cuda::load8(up + 8 * v, u);
#pragma unroll
            for (int k = 0; k < 8; ++k) swiglu_grad(d[k], g[k], u[k], dg[k], du[k]);
            cuda::store8(dgate + 8 * v, dg);
            cuda::store8(dup + 8 * v, du);
        }
        i += n / 8 * 8;
    }
    for (; i < n; i += stride) {
        float dg, du;
        swiglu_grad(__bfloat162float(dh[i]), __bfloat162float(gate[i]), __bfloat162float(up[i]), dg,
                    du);
        dgate[i] = __float2bfloat16_rn(dg);
        dup[i] = __float2bfloat16_rn(du);
    }
}

unsigned blocks_for(int64_t work) {
    const int64_t b = (work + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 8192 ? 8192 : b));
}

}  // namespace

// launchers

cudaError_t swiglu_forward(__nv_bfloat16* h, const __nv_bfloat16* gate, const __nv_bfloat16* up,
                           int64_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const bool vec = cuda::aligned16(h) && cuda::aligned16(gate) && cuda::aligned16(up);
    swiglu_forward_kernel<<<blocks_for(vec ? n / 8 + 1 : n), kThreads, 0, stream>>>(h, gate, up, n,
                                                                                    vec);
    return cudaGetLastError();
}

cudaError_t swiglu_backward(__nv_bfloat16* dgate, __nv_bfloat16* dup, const __nv_bfloat16* dh,
                            const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n,
                            cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const bool vec = cuda::aligned16(dgate) && cuda::aligned16(dup) && cuda::aligned16(dh) &&
                     cuda::aligned16(gate) && cuda::aligned16(up);
    swiglu_backward_kernel<<<blocks_for(vec ? n / 8 + 1 : n), kThreads, 0, stream>>>(
        dgate, dup, dh, gate, up, n, vec);
    return cudaGetLastError();
}

}  // namespace deltatune
