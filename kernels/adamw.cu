// Multi-tensor AdamW: one launch over every parameter tensor. Work is cut into fixed chunks
// (common/multi_tensor.h); a block takes chunks in a grid-stride loop and binary-searches its
// tensor. Per element it follows adamw_step_ref's operation order in fp32 and writes the bf16
// copy of the updated weight.
#include <cmath>

#include "kernels/adamw.h"
#include "kernels/common/multi_tensor.h"

namespace deltatune {

namespace {

constexpr int kThreads = 256;

// The step's scalars, rounded to fp32 once on the host exactly as adamw_step_ref rounds them.
struct AdamWScalars {
    float decay, m_weight, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
};

// kernels

__global__ void adamw_multi_tensor_kernel(const AdamWTensorArgs* tensors, int num_tensors,
                                          int64_t total_chunks, AdamWScalars s,
                                          const float* grad_scale) {
    const float scale = grad_scale ? *grad_scale : 1.0f;
    for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const AdamWTensorArgs t = tensors[find_tensor(tensors, num_tensors, chunk)];
        const int64_t begin = (chunk - t.chunk_begin) * kMultiTensorChunk;
        const int64_t end = min(t.n, begin + kMultiTensorChunk);
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const float g = t.grad[i] * scale;
            float p = t.param[i] * s.decay;
            float m = t.m[i];
            // torch.lerp(m, g, w): the |w| < 0.5 branch or the other, as the reference does.
            m = fabsf(s.m_weight) < 0.5f ? m + s.m_weight * (g - m)
                                         : g - (g - m) * (1.0f - s.m_weight);
            float v = t.v[i] * s.beta2;
            v = v + s.one_minus_beta2 * g * g;
            const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
            p = p + s.neg_step_size * m / denom;
            t.param[i] = p;
            t.m[i] = m;
            t.v[i] = v;
            if (t.param_bf16) t.param_bf16[i] = __float2bfloat16_rn(p);
        }
    }
}

}  // namespace

// launchers

int64_t adamw_plan_chunks(AdamWTensorArgs* tensors, int num_tensors) {
    return plan_chunks(tensors, num_tensors);
}

cudaError_t adamw_multi_tensor_step(const AdamWTensorArgs* tensors, int num_tensors,
                                    int64_t total_chunks, const AdamWHyper& hyper, int64_t step,
                                    const float* grad_scale, cudaStream_t stream) {
    if (num_tensors <= 0 || total_chunks <= 0) return cudaSuccess;
    if (step < 1) return cudaErrorInvalidValue;
    const double bias_correction1 = 1.0 - std::pow(hyper.beta1, static_cast<double>(step));
    const double bias_correction2 = 1.0 - std::pow(hyper.beta2, static_cast<double>(step));
    const AdamWScalars s{static_cast<float>(1.0 - hyper.lr * hyper.weight_decay),
                         static_cast<float>(1.0 - hyper.beta1),
                         static_cast<float>(hyper.beta2),
                         static_cast<float>(1.0 - hyper.beta2),
                         static_cast<float>(std::sqrt(bias_correction2)),
                         static_cast<float>(hyper.eps),
                         static_cast<float>(-(hyper.lr / bias_correction1))};
    const int64_t blocks = total_chunks < 65535 ? total_chunks : 65535;
    adamw_multi_tensor_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        tensors, num_tensors, total_chunks, s, grad_scale);
    return cudaGetLastError();
}

}  // namespace deltatune
