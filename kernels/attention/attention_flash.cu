// Varlen causal GQA flash attention for head_dim 256 with Qwen3.5's sigmoid output gate fused,
// forward and backward, on mma.sync m16n8k16 (bf16 in, fp32 accumulate).
//
// Tiles may straddle documents: every query row finds its own document start (binary search of
// cu_seqlens), and a key j is visible to row i iff doc_start(i) <= j <= i. So no host-side
// document list or max length is needed.
//   forward:  block = 4 warps = 64 query rows of one head; key tiles of 64; online softmax in
//             registers (FA2 layout: the score accumulators are reused as the A operand of P V).
//   backward: a pre-pass (attention_gate_backward) forms d_o = dy * sigmoid(gate), dgate and
//             delta = rowsum(d_o * o);
//             dk/dv: block = 32 keys of one kv head, looping over the group's query heads and the
//             query tiles that can see them (warps split keys x head_dim halves);
//             dq: block = 64 query rows, looping over key tiles. No atomics: deterministic.
// This file holds the forward; attention_flash_backward.cu the backward; the tile constants and
// mma.sync helpers they share are in attention_flash_common.cuh.
#include "kernels/attention/attention_flash_common.cuh"

namespace deltatune {

namespace {

__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(bf16* y, bf16* o, float* lse, const bf16* q, const bf16* k,
                             const bf16* v, const bf16* gate, const int32_t* cu, Geom geo) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* qs = reinterpret_cast<bf16*>(smem_raw);
    bf16* kv_stages = qs + kFwdRows * kStride;  // stage s: K at 2s, V at 2s + 1 (kFwdKeys rows)
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int c = lane & 3;
    const QueryRows<kFwdRows, kFwdKeys> rows(cu, geo);
    const auto& [h, kvh, q0, q_stride, kv_stride, kv_begin, kv_end, n_tiles] = rows;
    auto prefetch = [&](int64_t t) { rows.prefetch(kv_stages, t, k, v); };
    load_tile_async(qs, q + h * kD, q_stride, q0, kFwdRows, geo.tokens);
    prefetch(0);
    cp_async_commit();
    // This thread's two rows and their document starts.
    int64_t row[2];
    int64_t start[2];
    for (int i = 0; i < 2; ++i) {
        row[i] = q0 + warp * 16 + g + 8 * i;
        start[i] = row[i] < geo.tokens ? cu[cuda::doc_of(cu, geo.num_docs, row[i])] : INT64_MAX;
    }
    // A tile needs no mask for this warp when all 16 rows exist, it starts at or after the last
    // row's document start (the largest), and it ends at or before the first row.
    const int64_t warp_first = q0 + warp * 16;
    const bool warp_rows_valid = warp_first + 15 < geo.tokens;
    const int64_t warp_last_start = __shfl_sync(0xffffffffu, start[1], 31);

    float acc[kD / 8][4];
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY};
    float l[2] = {0.0f, 0.0f};

    for (int64_t t = 0; t < n_tiles; ++t) {
        // Stage (t + 1) % 2 was last read in iteration t - 1, which ended with a barrier.
        if (t + 1 < n_tiles) prefetch(t + 1);
        cp_async_commit();         // possibly empty: keeps "all but the newest group" = tile t
        cuda::cp_async_wait<1>();  // at most one group in flight
        __syncthreads();
        const int64_t j0 = kv_begin + t * kFwdKeys;
        const bf16* ks = kv_stages + (t & 1) * 2 * kFwdKeys * kStride;
        const bf16* vs = ks + kFwdKeys * kStride;
        const bool unmasked =
            warp_rows_valid && j0 >= warp_last_start && j0 + kFwdKeys - 1 <= warp_first;
        float s[kFwdKeys / 8][4];
#pragma unroll
        for (int n = 0; n < kFwdKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll 4
        for (int kk = 0; kk < kD; kk += 16) {
            uint32_t a[4];
            load_a(a, qs, warp * 16, kk);
#pragma unroll
            for (int n = 0; n < kFwdKeys / 8; n += 2) {
                uint32_t b0[2], b1[2];
                load_b_nk2(b0, b1, ks, n * 8, kk);
                mma16816(s[n], a, b0);
                mma16816(s[n + 1], a, b1);
            }
        }
        // Mask, scale to log2 units, online softmax per row (rows g and g + 8 of the warp).
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < kFwdKeys / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = e >> 1;
                const int64_t key = j0 + n * 8 + 2 * c + (e & 1);
                const bool ok = unmasked || (key >= start[i] && key <= row[i]);
                s[n][e] = ok ? s[n][e] * geo.scale_log2 : -INFINITY;
                tile_max[i] = fmaxf(tile_max[i], s[n][e]);
            }
        }
        float alpha[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
            tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
            const float m_new = fmaxf(m[i], tile_max[i]);
            alpha[i] = m_new == -INFINITY ? 1.0f : exp2f(m[i] - m_new);
            m[i] = m_new;
        }
        float rowsum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < kFwdKeys / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = e >> 1;
                s[n][e] = m[i] == -INFINITY ? 0.0f : exp2f(s[n][e] - m[i]);
                rowsum[i] += s[n][e];
            }
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) l[i] = l[i] * alpha[i] + rowsum[i];
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
            acc[n][0] *= alpha[0];
            acc[n][1] *= alpha[0];
            acc[n][2] *= alpha[1];
            acc[n][3] *= alpha[1];
        }
        // O += P V, P straight from the score registers.
#pragma unroll
        for (int kk = 0; kk < kFwdKeys / 16; ++kk) {
            uint32_t a[4];
            acc_to_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < kD / 8; n += 2) {
                uint32_t b0[2], b1[2];
                load_b_kn2(b0, b1, vs, kk * 16, n * 8);
                mma16816(acc[n], a, b0);
                mma16816(acc[n + 1], a, b1);
            }
        }
        __syncthreads();  // every warp is done with stage t % 2 before it is refilled
    }
    // Normalise, write o, y = o * sigmoid(gate) (from the rounded o, as the bf16 model does),
    // and the natural-log lse.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (row[i] >= geo.tokens) continue;
        const float inv = 1.0f / l[i];
        bf16* orow = o + row[i] * q_stride + h * kD;
        bf16* yrow = y + row[i] * q_stride + h * kD;
        const bf16* grow = gate + row[i] * geo.gate_token_stride + h * geo.gate_head_stride;
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
            const int col = n * 8 + 2 * c;
            const __nv_bfloat162 ov =
                __floats2bfloat162_rn(acc[n][2 * i] * inv, acc[n][2 * i + 1] * inv);
            *reinterpret_cast<__nv_bfloat162*>(orow + col) = ov;
            const float2 of = __bfloat1622float2(ov);
            const float g0 = __bfloat162float(grow[col]);
            const float g1 = __bfloat162float(grow[col + 1]);
            *reinterpret_cast<__nv_bfloat162*>(yrow + col) =
                __floats2bfloat162_rn(of.x / (1.0f + expf(-g0)), of.y / (1.0f + expf(-g1)));
        }
        if (c == 0) lse[row[i] * geo.q_heads + h] = (m[i] + log2f(l[i])) * kLn2;
    }
}

// dk, dv for 32 keys of one kv head. Warp w: keys 16 * (w % 2) .. + 16, head_dim half w / 2.

}  // namespace

bool gated_attention_supported(const GatedAttentionArgs& a) {
    return a.head_dim == kD && a.q_heads > 0 && a.kv_heads > 0 && a.q_heads % a.kv_heads == 0 &&
           a.q_heads <= 65535 && a.num_docs > 0 && a.tokens >= 0 && a.q && a.k && a.v && a.gate &&
           a.cu_seqlens && a.gate_token_stride % 8 == 0 && a.gate_head_stride % 8 == 0 &&
           cuda::aligned16(a.q) && cuda::aligned16(a.k) && cuda::aligned16(a.v) &&
           cuda::aligned16(a.gate) && a.scale > 0.0f && a.scale < INFINITY;
}

cudaError_t gated_attention_forward(bf16* y, bf16* o, float* lse, const GatedAttentionArgs& a,
                                    cudaStream_t stream) {
    if (!gated_attention_supported(a)) return cudaErrorInvalidValue;
    if (a.tokens == 0) return cudaSuccess;
    if (cudaError_t e = set_smem(attention_forward_kernel, kFwdSmem); e != cudaSuccess) return e;
    const dim3 grid(static_cast<unsigned>((a.tokens + kFwdRows - 1) / kFwdRows),
                    static_cast<unsigned>(a.q_heads));
    attention_forward_kernel<<<grid, kThreads, kFwdSmem, stream>>>(y, o, lse, a.q, a.k, a.v, a.gate,
                                                                   a.cu_seqlens, geom_of(a));
    return cudaGetLastError();
}

}  // namespace deltatune
