// Sigmoid output gate passes and cuDNN ragged offsets (attention_gate.h). One warp per
// (token, head) row of 256 values, 8 per lane, 16-byte loads.
#include "kernels/attention/attention_gate.h"

#include "kernels/common/cuda_utils.cuh"

namespace deltatune {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kD = 256;
constexpr int kWarps = 8;  // rows per block

// Row r = (token, head) of the 256-wide rows: this lane's offsets in o-like tensors and in the
// gate.
struct RowAt {
    int64_t off, goff;
};
__device__ __forceinline__ RowAt row_at(const AttentionGateLayout& g, int64_t r, int64_t q_heads,
                                        int lane) {
    return {r * kD + lane * 8,
            (r / q_heads) * g.token_stride + (r % q_heads) * g.head_stride + lane * 8};
}

__global__ void gate_forward_kernel(bf16* y, const bf16* o, AttentionGateLayout g, int64_t rows,
                                    int64_t q_heads) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int lane = threadIdx.x & 31;
    const auto [off, goff] = row_at(g, r, q_heads, lane);
    float ov[8], gv[8], yv[8];
    cuda::load8(o + off, ov);
    cuda::load8(g.gate + goff, gv);  // layout_ok: 16-byte aligned
#pragma unroll
    for (int i = 0; i < 8; ++i) yv[i] = ov[i] / (1.0f + expf(-gv[i]));
    cuda::store8(y + off, yv);
}

// kFromY: the saved tensor `saved` is y = o * sigmoid(gate) rather than o (the wgmma forward
// keeps only y): dgate = dy * y * (1 - sigmoid), and delta = sum d_o * (y / sigmoid), with the
// same bf16-rounded d_o as the backward's dP = d_o V: then that rounding cancels in dP - delta,
// as it does from o. (sum dy * y, equal in real numbers, left it in: dq's worst row on tiny
// documents went from 0.13 to 0.41, measured.) y / sigmoid = y (1 + e^-gate) keeps y's relative
// rounding; where the sigmoid underflowed to 0, d_o is 0 and so is the term.
template <bool kFromY>
__global__ void gate_backward_kernel(bf16* d_o, float* delta, bf16* dgate, const bf16* dy,
                                     const bf16* saved, AttentionGateLayout g, int64_t rows,
                                     int64_t q_heads) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int lane = threadIdx.x & 31;
    const auto [off, goff] = row_at(g, r, q_heads, lane);
    float dyv[8], sv[8], gv[8], dov[8], dgv[8];
    cuda::load8(dy + off, dyv);
    cuda::load8(saved + off, sv);
    cuda::load8(g.gate + goff, gv);  // layout_ok: 16-byte aligned
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float e = expf(-gv[i]);
        const float sig = 1.0f / (1.0f + e);
        dov[i] = __bfloat162float(__float2bfloat16_rn(dyv[i] * sig));
        if constexpr (kFromY) {
            dgv[i] = dyv[i] * sv[i] * (1.0f - sig);
            dot += sig > 0.0f ? dov[i] * (sv[i] * (1.0f + e)) : 0.0f;  // y / sigmoid
        } else {
            dgv[i] = dyv[i] * sv[i] * sig * (1.0f - sig);
            dot += dov[i] * sv[i];
        }
    }
    cuda::store8(d_o + off, dov);
    cuda::store8(dgate + goff, dgv);
    if (delta == nullptr) return;
    dot = cuda::warp_sum(dot);
    if (lane == 0) delta[r] = dot;
}

__global__ void ragged_offsets_kernel(int32_t* seq_len, int64_t* q_off, int64_t* kv_off,
                                      int64_t* stats_off, const int32_t* cu, int64_t num_docs,
                                      int64_t slots, int64_t q_heads, int64_t kv_heads,
                                      int64_t head_dim) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i > slots) return;
    const int64_t start = cu[i < num_docs ? i : num_docs];
    if (i < slots) seq_len[i] = i < num_docs ? cu[i + 1] - cu[i] : 0;
    q_off[i] = start * q_heads * head_dim;
    kv_off[i] = start * kv_heads * head_dim;
    stats_off[i] = start * q_heads;
}

unsigned row_blocks(int64_t rows) {
    return static_cast<unsigned>((rows + kWarps - 1) / kWarps);
}

bool layout_ok(const AttentionGateLayout& g) {
    return g.gate && cuda::aligned16(g.gate) && g.token_stride % 8 == 0 && g.head_stride % 8 == 0;
}

template <bool kFromY>
cudaError_t gate_backward(bf16* d_o, float* delta, bf16* dgate, const bf16* dy, const bf16* saved,
                          AttentionGateLayout g, int64_t tokens, int64_t q_heads,
                          cudaStream_t stream) {
    if (!layout_ok(g) || !cuda::aligned16(d_o) || !cuda::aligned16(dy) || !cuda::aligned16(saved) ||
        !cuda::aligned16(dgate) || q_heads <= 0) {
        return cudaErrorInvalidValue;
    }
    const int64_t rows = tokens * q_heads;
    if (rows == 0) return cudaSuccess;
    gate_backward_kernel<kFromY><<<row_blocks(rows), kWarps * 32, 0, stream>>>(
        d_o, delta, dgate, dy, saved, g, rows, q_heads);
    return cudaGetLastError();
}

}  // namespace

cudaError_t attention_gate_forward(bf16* y, const bf16* o, AttentionGateLayout g, int64_t tokens,
                                   int64_t q_heads, cudaStream_t stream) {
    if (!layout_ok(g) || !cuda::aligned16(y) || !cuda::aligned16(o) || q_heads <= 0) {
        return cudaErrorInvalidValue;
    }
    const int64_t rows = tokens * q_heads;
    if (rows == 0) return cudaSuccess;
    gate_forward_kernel<<<row_blocks(rows), kWarps * 32, 0, stream>>>(y, o, g, rows, q_heads);
    return cudaGetLastError();
}

cudaError_t attention_gate_backward(bf16* d_o, float* delta, bf16* dgate, const bf16* dy,
                                    const bf16* o, AttentionGateLayout g, int64_t tokens,
                                    int64_t q_heads, cudaStream_t stream) {
    return gate_backward<false>(d_o, delta, dgate, dy, o, g, tokens, q_heads, stream);
}

cudaError_t attention_gate_backward_from_y(bf16* d_o, float* delta, bf16* dgate, const bf16* dy,
                                           const bf16* y, AttentionGateLayout g, int64_t tokens,
                                           int64_t q_heads, cudaStream_t stream) {
    return gate_backward<true>(d_o, delta, dgate, dy, y, g, tokens, q_heads, stream);
}

cudaError_t attention_ragged_offsets(int32_t* seq_len, int64_t* q_off, int64_t* kv_off,
                                     int64_t* stats_off, const int32_t* cu_seqlens,
                                     int64_t num_docs, int64_t slots, int64_t q_heads,
                                     int64_t kv_heads, int64_t head_dim, cudaStream_t stream) {
    if (num_docs <= 0 || slots < num_docs) return cudaErrorInvalidValue;
    ragged_offsets_kernel<<<static_cast<unsigned>((slots + 1 + 255) / 256), 256, 0, stream>>>(
        seq_len, q_off, kv_off, stats_off, cu_seqlens, num_docs, slots, q_heads, kv_heads,
        head_dim);
    return cudaGetLastError();
}

}  // namespace deltatune
