// Multi-tensor AdamW: one launch over every parameter tensor. Work is cut into fixed chunks
// (common/multi_tensor.h); a block takes chunks in a grid-stride loop and binary-searches its
// tensor. Per element it follows adamw_step_ref's operation order in fp32 and writes the bf16
// copy of the updated weight.
#include <algorithm>
#include <cmath>

#include "kernels/optim/adamw.h"
#include "kernels/optim/multi_tensor.h"

namespace deltatune {

namespace {

constexpr int kThreads = 256;

// kernels

// One element, in adamw_step_ref's operation order.
__device__ __forceinline__ void update(float& p, float& m, float& v, float g,
                                       const AdamWStepScalars& s) {
    p *= s.decay;
    // torch.lerp(m, g, w): the |w| < 0.5 branch or the other, as the reference does.
    m = fabsf(s.m_weight) < 0.5f ? m + s.m_weight * (g - m) : g - (g - m) * (1.0f - s.m_weight);
    v = v * s.beta2;
    v = v + s.one_minus_beta2 * g * g;
    const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
    p = p + s.neg_step_size * m / denom;
}

// Element i of t: its master and moments through f(p, m, v), then written back with the bf16
// copy (the step's scalar path and the deferred steps' catch-up).
template <typename F>
__device__ __forceinline__ void update_element(const AdamWTensorArgs& t, int64_t i, F&& f) {
    float p = t.param[i], m = t.m[i], v = t.v[i];
    f(p, m, v);
    t.param[i] = p;
    t.m[i] = m;
    t.v[i] = v;
    if (t.param_bf16) t.param_bf16[i] = __float2bfloat16_rn(p);
}

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

__global__ void adamw_multi_tensor_kernel(const AdamWTensorArgs* tensors, int num_tensors,
                                          int64_t total_chunks, AdamWStepScalars s,
                                          const float* grad_scale) {
    const float scale = grad_scale ? *grad_scale : 1.0f;
    for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const AdamWTensorArgs t = tensors[find_tensor(tensors, num_tensors, chunk)];
        const int64_t begin = (chunk - t.chunk_begin) * kMultiTensorChunk;
        const int64_t end = min(t.n, begin + kMultiTensorChunk);
        // Four elements per thread with 16-byte accesses where every array allows it (the
        // bf16 copy then 8-byte): four times the bytes in flight per load.
        const bool vec =
            aligned16(t.param + begin) && aligned16(t.m + begin) && aligned16(t.v + begin) &&
            aligned16(t.grad + begin) &&
            (!t.param_bf16 || (reinterpret_cast<uintptr_t>(t.param_bf16 + begin) & 7) == 0);
        // Rows the mask knows to be zero update with g = 0, their gradient unread.
        const ChunkRead read = chunk_read(t.rows, begin);
        int64_t i = begin;
        if (vec) {
            const int64_t quads = (end - begin) / 4;
            for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
                const int64_t at = begin + 4 * q;
                const bool marked = read.at(at);
                if (!marked && t.defer_unmarked) continue;
                const float4 g4 = marked ? *reinterpret_cast<const float4*>(t.grad + at)
                                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                float4 p4 = *reinterpret_cast<const float4*>(t.param + at);
                float4 m4 = *reinterpret_cast<const float4*>(t.m + at);
                float4 v4 = *reinterpret_cast<const float4*>(t.v + at);
                update(p4.x, m4.x, v4.x, g4.x * scale, s);
                update(p4.y, m4.y, v4.y, g4.y * scale, s);
                update(p4.z, m4.z, v4.z, g4.z * scale, s);
                update(p4.w, m4.w, v4.w, g4.w * scale, s);
                *reinterpret_cast<float4*>(t.param + at) = p4;
                *reinterpret_cast<float4*>(t.m + at) = m4;
                *reinterpret_cast<float4*>(t.v + at) = v4;
                if (t.param_bf16) {
                    __nv_bfloat162 lo = __floats2bfloat162_rn(p4.x, p4.y);
                    __nv_bfloat162 hi = __floats2bfloat162_rn(p4.z, p4.w);
                    uint2 packed;
                    packed.x = *reinterpret_cast<uint32_t*>(&lo);
                    packed.y = *reinterpret_cast<uint32_t*>(&hi);
                    *reinterpret_cast<uint2*>(t.param_bf16 + at) = packed;
                }
            }
            i = begin + 4 * quads;
        }
        for (i += threadIdx.x; i < end; i += blockDim.x) {
            if (!read.at(i) && t.defer_unmarked) continue;
            update_element(t, i, [&](float& p, float& m, float& v) {
                update(p, m, v, (read.at(i) ? t.grad[i] : 0.0f) * scale, s);
            });
        }
    }
}

__global__ void record_scalars_kernel(AdamWStepScalars* table, int64_t index, AdamWStepScalars s) {
    table[index] = s;
}

// A warp per row (sorted ids: the first position of each id; or every row): the row's deferred
// zero-gradient steps, in order, then its bf16 copy. The same update() as the step kernel, with
// g = +0 as a loaded zero gives, so the bits are those of updating every step.
__global__ void catch_up_rows_kernel(AdamWTensorArgs t, const int32_t* sorted_ids, int64_t n,
                                     int32_t* row_pos, const AdamWStepScalars* table,
                                     int32_t table_len) {
    constexpr int kWarps = kThreads / 32;
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
    for (int64_t k = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; k < n;
         k += warps) {
        int64_t r = k;
        if (sorted_ids) {
            if (k > 0 && sorted_ids[k] == sorted_ids[k - 1]) continue;  // one warp per id
            r = sorted_ids[k];
        }
        const int32_t from = row_pos[r];
        if (from >= table_len) continue;
        const int64_t base = t.rows.begin + r * t.rows.row_len;
        for (int64_t i = base + lane; i < base + t.rows.row_len; i += 32) {
            update_element(t, i, [&](float& p, float& m, float& v) {
                for (int32_t j = from; j < table_len; ++j) update(p, m, v, 0.0f, table[j]);
            });
        }
        __syncwarp();  // every lane has read row_pos[r]
        if (lane == 0) row_pos[r] = table_len;
    }
}

}  // namespace

// launchers

AdamWStepScalars adamw_step_scalars(const AdamWHyper& hyper, int64_t step) {
    const double bias_correction1 = 1.0 - std::pow(hyper.beta1, static_cast<double>(step));
    const double bias_correction2 = 1.0 - std::pow(hyper.beta2, static_cast<double>(step));
    return {static_cast<float>(1.0 - hyper.lr * hyper.weight_decay),
            static_cast<float>(1.0 - hyper.beta1),
            static_cast<float>(hyper.beta2),
            static_cast<float>(1.0 - hyper.beta2),
            static_cast<float>(std::sqrt(bias_correction2)),
            static_cast<float>(hyper.eps),
            static_cast<float>(-(hyper.lr / bias_correction1))};
}

int64_t adamw_plan_chunks(AdamWTensorArgs* tensors, int num_tensors) {
    return plan_chunks(tensors, num_tensors);
}

cudaError_t adamw_multi_tensor_step(const AdamWTensorArgs* tensors, int num_tensors,
                                    int64_t total_chunks, const AdamWHyper& hyper, int64_t step,
                                    const float* grad_scale, cudaStream_t stream) {
    if (num_tensors <= 0 || total_chunks <= 0) return cudaSuccess;
    if (step < 1) return cudaErrorInvalidValue;
    const AdamWStepScalars s = adamw_step_scalars(hyper, step);
    const int64_t blocks = total_chunks < 65535 ? total_chunks : 65535;
    adamw_multi_tensor_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        tensors, num_tensors, total_chunks, s, grad_scale);
    return cudaGetLastError();
}

cudaError_t adamw_record_scalars(AdamWStepScalars* table, int64_t index, const AdamWHyper& hyper,
                                 int64_t step, cudaStream_t stream) {
    if (step < 1 || index < 0) return cudaErrorInvalidValue;
    record_scalars_kernel<<<1, 1, 0, stream>>>(table, index, adamw_step_scalars(hyper, step));
    return cudaGetLastError();
}

cudaError_t adamw_catch_up_rows(const AdamWTensorArgs& t, const int32_t* sorted_ids, int64_t n,
                                int32_t* row_pos, const AdamWStepScalars* table, int32_t table_len,
                                cudaStream_t stream) {
    if (!row_mask_valid(t.rows) || n < 0 || table_len < 0) return cudaErrorInvalidValue;
    const int64_t items = sorted_ids ? n : t.rows.rows;
    if (items == 0 || table_len == 0) return cudaSuccess;
    const int64_t warps_per_block = kThreads / 32;
    const int64_t blocks = std::min<int64_t>((items + warps_per_block - 1) / warps_per_block, 8192);
    catch_up_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        t, sorted_ids, items, row_pos, table, table_len);
    return cudaGetLastError();
}

}  // namespace deltatune
