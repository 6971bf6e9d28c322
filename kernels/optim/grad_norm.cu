// Global gradient norm: pass 1 writes one fp32 sum of squares per chunk (a block per chunk,
// fixed tree order), pass 2 is one block summing the partials in double in a fixed order. The
// chunking depends only on the tensor sizes, so the result is bitwise reproducible.
#include "kernels/common/cuda_utils.cuh"
#include "kernels/optim/grad_norm.h"
#include "kernels/optim/multi_tensor.h"

namespace deltatune {

namespace {

constexpr int kThreads = 256;
constexpr int kFinalThreads = 1024;

// kernels

__global__ void grad_norm_partials_kernel(float* partials, const GradNormTensor* tensors,
                                          int num_tensors, int64_t total_chunks) {
    __shared__ float scratch[32];
    for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const GradNormTensor t = tensors[find_tensor(tensors, num_tensors, chunk)];
        const int64_t begin = (chunk - t.chunk_begin) * kMultiTensorChunk;
        const int64_t end = min(t.n, begin + kMultiTensorChunk);
        // Rows the mask knows to be zero add nothing (the same bits as adding their zeros).
        const ChunkRead read = chunk_read(t.rows, begin);
        float s = 0.0f;
        int64_t tail = begin;
        if (reinterpret_cast<uintptr_t>(t.grad) % 16 == 0) {  // chunks start at multiples of 4
            const auto* g4 = reinterpret_cast<const float4*>(t.grad + begin);
            const int64_t n4 = (end - begin) / 4;
#pragma unroll 4
            for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
                if (!read.at(begin + 4 * i)) continue;
                const float4 x = g4[i];
                s += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
            }
            tail = begin + n4 * 4;
        }
        for (int64_t i = tail + threadIdx.x; i < end; i += blockDim.x) {
            if (read.at(i)) s += t.grad[i] * t.grad[i];
        }
        s = cuda::block_sum(s, scratch);
        if (threadIdx.x == 0) partials[chunk] = s;
    }
}

__global__ void grad_norm_final_kernel(float* norm, float* clip_coef, const float* partials,
                                       int64_t total_chunks, float max_norm) {
    __shared__ double tree[kFinalThreads];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < total_chunks; i += blockDim.x) s += partials[i];
    tree[threadIdx.x] = s;
    __syncthreads();
    for (int half = kFinalThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) tree[threadIdx.x] += tree[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const float total = static_cast<float>(sqrt(tree[0]));
        *norm = total;
        if (clip_coef) *clip_coef = fminf(1.0f, max_norm / (total + 1e-6f));
    }
}

}  // namespace

// launchers

int64_t grad_norm_plan_chunks(GradNormTensor* tensors, int num_tensors) {
    return plan_chunks(tensors, num_tensors);
}

size_t grad_norm_workspace_bytes(int64_t total_chunks) {
    return sizeof(float) * static_cast<size_t>(total_chunks > 0 ? total_chunks : 1);
}

cudaError_t global_grad_norm(float* norm, float* clip_coef, const GradNormTensor* tensors,
                             int num_tensors, int64_t total_chunks, float max_norm, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
    if (workspace_bytes < grad_norm_workspace_bytes(total_chunks)) return cudaErrorInvalidValue;
    auto* partials = static_cast<float*>(workspace);
    if (num_tensors > 0 && total_chunks > 0) {
        const int64_t blocks = total_chunks < 65535 ? total_chunks : 65535;
        grad_norm_partials_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            partials, tensors, num_tensors, total_chunks);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    grad_norm_final_kernel<<<1, kFinalThreads, 0, stream>>>(norm, clip_coef, partials, total_chunks,
                                                            max_norm);
    return cudaGetLastError();
}

}  // namespace deltatune
