// The handwritten flash attention's backward (attention_flash.cu has the design): a pre-pass
// (attention_gate_backward) forms d_o = dy * sigmoid(gate), dgate and delta = rowsum(d_o * o);
// the dk/dv kernel runs a block per 32 keys of one kv head over the group's query heads and the
// query tiles that can see them; the dq kernel a block per 64 query rows over key tiles. No
// atomics: deterministic.
#include "kernels/attention/attention_flash_common.cuh"
#include "kernels/attention/attention_gate.h"

namespace deltatune {

namespace {

__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(bf16* dk, bf16* dv, const bf16* q, const bf16* k, const bf16* v,
                                   const bf16* d_o, const float* lse, const float* delta,
                                   const int32_t* cu, Geom geo) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* ks = reinterpret_cast<bf16*>(smem_raw);
    bf16* vs = ks + kBwdKeys * kStride;
    bf16* q_stages = vs + kBwdKeys * kStride;  // stage s: Q at 2s, dO at 2s + 1 (kBwdQueries rows)
    // Per stage and query: document start, lse in log2 units, delta.
    int64_t* qstart_stages = reinterpret_cast<int64_t*>(q_stages + 4 * kBwdQueries * kStride);
    float* lse2_stages = reinterpret_cast<float*>(qstart_stages + 2 * kBwdQueries);
    float* delta_stages = lse2_stages + 2 * kBwdQueries;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int c = lane & 3;
    const int kb = (warp & 1) * 16;       // this warp's first key within the tile
    const int dbase = (warp >> 1) * 128;  // this warp's head_dim half
    const int kvh = blockIdx.y;
    const int group = geo.q_heads / geo.kv_heads;
    const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kBwdKeys;
    const int64_t kv_stride = static_cast<int64_t>(geo.kv_heads) * kD;
    const int64_t q_stride = static_cast<int64_t>(geo.q_heads) * kD;
    const int64_t last_key = min(geo.tokens, k0 + kBwdKeys) - 1;
    const int64_t q_end = cu[cuda::doc_of(cu, geo.num_docs, last_key) + 1];

    // The work is (query head of the group) x (query tile from k0 to q_end), flattened so the
    // next tile's copies overlap this tile's products across head boundaries too.
    const int64_t q_tiles = (q_end - k0 + kBwdQueries - 1) / kBwdQueries;
    const int64_t n_tiles = q_tiles * group;
    auto prefetch = [&](int64_t t) {  // tile t into stage t % 2
        const int hq = kvh * group + static_cast<int>(t / q_tiles);
        const int64_t i0 = k0 + (t % q_tiles) * kBwdQueries;
        const int st = static_cast<int>(t & 1);
        bf16* qst = q_stages + st * 2 * kBwdQueries * kStride;
        load_tile_async(qst, q + hq * kD, q_stride, i0, kBwdQueries, q_end);
        load_tile_async(qst + kBwdQueries * kStride, d_o + hq * kD, q_stride, i0, kBwdQueries,
                        q_end);
        for (int i = threadIdx.x; i < kBwdQueries; i += blockDim.x) {
            const int64_t qi = i0 + i;
            const bool in = qi < q_end;
            lse2_stages[st * kBwdQueries + i] = in ? lse[qi * geo.q_heads + hq] * kLog2e : 0.0f;
            delta_stages[st * kBwdQueries + i] = in ? delta[qi * geo.q_heads + hq] : 0.0f;
            qstart_stages[st * kBwdQueries + i] =
                in ? cu[cuda::doc_of(cu, geo.num_docs, qi)] : INT64_MAX;
        }
    };
    load_tile_async(ks, k + kvh * kD, kv_stride, k0, kBwdKeys, geo.tokens);
    load_tile_async(vs, v + kvh * kD, kv_stride, k0, kBwdKeys, geo.tokens);
    prefetch(0);
    cp_async_commit();

    float dk_acc[16][4];
    float dv_acc[16][4];
#pragma unroll
    for (int n = 0; n < 16; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;
    }
    int64_t key[2];
    for (int i = 0; i < 2; ++i) key[i] = k0 + kb + g + 8 * i;

    for (int64_t t = 0; t < n_tiles; ++t) {
        if (t + 1 < n_tiles) prefetch(t + 1);
        cp_async_commit();
        cuda::cp_async_wait<1>();  // at most one group in flight
        __syncthreads();
        const int st_idx = static_cast<int>(t & 1);
        const int64_t i0 = k0 + (t % q_tiles) * kBwdQueries;
        const bf16* qs = q_stages + st_idx * 2 * kBwdQueries * kStride;
        const bf16* dos = qs + kBwdQueries * kStride;
        const int64_t* qstart_s = qstart_stages + st_idx * kBwdQueries;
        const float* lse2_s = lse2_stages + st_idx * kBwdQueries;
        const float* delta_s = delta_stages + st_idx * kBwdQueries;
        // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x 32 queries.
        float st[kBwdQueries / 8][4];
        float dpt[kBwdQueries / 8][4];
        paired_products(st, dpt, ks, vs, kb, qs, dos);
        // P^T and dS^T in place (st -> P^T, dpt -> dS^T).
#pragma unroll
        for (int n = 0; n < kBwdQueries / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int qi = n * 8 + 2 * c + (e & 1);
                const int64_t kj = key[e >> 1];
                const bool ok = kj >= qstart_s[qi] && kj <= i0 + qi;
                const float p = ok ? exp2f(st[n][e] * geo.scale_log2 - lse2_s[qi]) : 0.0f;
                st[n][e] = p;
                dpt[n][e] = p * (dpt[n][e] - delta_s[qi]);
            }
        }
        // dV += P^T dO, dK += dS^T Q over this warp's head_dim half.
#pragma unroll
        for (int kk = 0; kk < kBwdQueries / 16; ++kk) {
            uint32_t ap[4], ads[4];
            acc_to_a(ap, st[2 * kk], st[2 * kk + 1]);
            acc_to_a(ads, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < 16; n += 2) {
                uint32_t b0[2], b1[2];
                load_b_kn2(b0, b1, dos, kk * 16, dbase + n * 8);
                mma16816(dv_acc[n], ap, b0);
                mma16816(dv_acc[n + 1], ap, b1);
                load_b_kn2(b0, b1, qs, kk * 16, dbase + n * 8);
                mma16816(dk_acc[n], ads, b0);
                mma16816(dk_acc[n + 1], ads, b1);
            }
        }
        __syncthreads();  // stage t % 2 fully read before it is refilled
    }
    const float scale = geo.scale_log2 / kLog2e;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (key[i] >= geo.tokens) continue;
        bf16* dkrow = dk + key[i] * kv_stride + kvh * kD + dbase;
        bf16* dvrow = dv + key[i] * kv_stride + kvh * kD + dbase;
#pragma unroll
        for (int n = 0; n < 16; ++n) {
            const int col = n * 8 + 2 * c;
            *reinterpret_cast<__nv_bfloat162*>(dkrow + col) =
                __floats2bfloat162_rn(dk_acc[n][2 * i] * scale, dk_acc[n][2 * i + 1] * scale);
            *reinterpret_cast<__nv_bfloat162*>(dvrow + col) =
                __floats2bfloat162_rn(dv_acc[n][2 * i], dv_acc[n][2 * i + 1]);
        }
    }
}

// dq for 64 query rows of one head, looping over the key tiles they can see.
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(bf16* dq, const bf16* q, const bf16* k, const bf16* v,
                                 const bf16* d_o, const float* lse, const float* delta,
                                 const int32_t* cu, Geom geo) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* qs = reinterpret_cast<bf16*>(smem_raw);
    bf16* dos = qs + kDqRows * kStride;
    bf16* kv_stages = dos + kDqRows * kStride;  // stage s: K at 2s, V at 2s + 1 (kDqKeys rows)
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int c = lane & 3;
    const QueryRows<kDqRows, kDqKeys> rows(cu, geo);
    const auto& [h, kvh, q0, q_stride, kv_stride, kv_begin, kv_end, n_tiles] = rows;
    auto prefetch = [&](int64_t t) { rows.prefetch(kv_stages, t, k, v); };
    load_tile_async(qs, q + h * kD, q_stride, q0, kDqRows, geo.tokens);
    load_tile_async(dos, d_o + h * kD, q_stride, q0, kDqRows, geo.tokens);
    prefetch(0);
    cp_async_commit();
    int64_t row[2], start[2];
    float lse2[2], dlt[2];
    for (int i = 0; i < 2; ++i) {
        row[i] = q0 + warp * 16 + g + 8 * i;
        const bool in = row[i] < geo.tokens;
        start[i] = in ? cu[cuda::doc_of(cu, geo.num_docs, row[i])] : INT64_MAX;
        lse2[i] = in ? lse[row[i] * geo.q_heads + h] * kLog2e : 0.0f;
        dlt[i] = in ? delta[row[i] * geo.q_heads + h] : 0.0f;
    }
    float acc[kD / 8][4];
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int64_t t = 0; t < n_tiles; ++t) {
        if (t + 1 < n_tiles) prefetch(t + 1);
        cp_async_commit();
        cuda::cp_async_wait<1>();  // at most one group in flight
        __syncthreads();
        const int64_t j0 = kv_begin + t * kDqKeys;
        const bf16* ks = kv_stages + (t & 1) * 2 * kDqKeys * kStride;
        const bf16* vs = ks + kDqKeys * kStride;
        float s[kDqKeys / 8][4];
        float dp[kDqKeys / 8][4];
        paired_products(s, dp, qs, dos, warp * 16, ks, vs);
#pragma unroll
        for (int n = 0; n < kDqKeys / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = e >> 1;
                const int64_t kj = j0 + n * 8 + 2 * c + (e & 1);
                const bool ok = kj >= start[i] && kj <= row[i];
                const float p = ok ? exp2f(s[n][e] * geo.scale_log2 - lse2[i]) : 0.0f;
                s[n][e] = p * (dp[n][e] - dlt[i]);  // dS
            }
        }
#pragma unroll
        for (int kk = 0; kk < kDqKeys / 16; ++kk) {
            uint32_t a[4];
            acc_to_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < kD / 8; n += 2) {
                uint32_t b0[2], b1[2];
                load_b_kn2(b0, b1, ks, kk * 16, n * 8);
                mma16816(acc[n], a, b0);
                mma16816(acc[n + 1], a, b1);
            }
        }
        __syncthreads();  // stage t % 2 fully read before it is refilled
    }
    const float scale = geo.scale_log2 / kLog2e;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (row[i] >= geo.tokens) continue;
        bf16* dqrow = dq + row[i] * q_stride + h * kD;
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
            *reinterpret_cast<__nv_bfloat162*>(dqrow + n * 8 + 2 * c) =
                __floats2bfloat162_rn(acc[n][2 * i] * scale, acc[n][2 * i + 1] * scale);
        }
    }
}

}  // namespace

size_t gated_attention_backward_workspace_bytes(const GatedAttentionArgs& a) {
    const size_t rows = static_cast<size_t>(a.tokens * a.q_heads);
    return align256(sizeof(bf16) * rows * kD) + align256(sizeof(float) * rows);
}

cudaError_t gated_attention_backward(bf16* dq, bf16* dk, bf16* dv, bf16* dgate, const bf16* dy,
                                     const bf16* o, const float* lse, const GatedAttentionArgs& a,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (!gated_attention_supported(a)) return cudaErrorInvalidValue;
    if (a.tokens == 0) return cudaSuccess;
    if (workspace_bytes < gated_attention_backward_workspace_bytes(a)) {
        return cudaErrorInvalidValue;
    }
    // dy, o and the workspace are read and written 16 bytes at a time.
    if (!cuda::aligned16(dy) || !cuda::aligned16(o) || !cuda::aligned16(workspace)) {
        return cudaErrorInvalidValue;
    }
    const Geom geo = geom_of(a);
    const size_t rows = static_cast<size_t>(a.tokens * a.q_heads);
    auto* d_o = static_cast<bf16*>(workspace);
    auto* delta = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                           align256(sizeof(bf16) * rows * kD));
    if (cudaError_t e = attention_gate_backward(d_o, delta, dgate, dy, o,
                                                {a.gate, a.gate_token_stride, a.gate_head_stride},
                                                a.tokens, a.q_heads, stream);
        e != cudaSuccess) {
        return e;
    }
    if (cudaError_t e = set_smem(attention_backward_dkdv_kernel, kDkdvSmem); e != cudaSuccess) {
        return e;
    }
    const dim3 grid_kv(static_cast<unsigned>((a.tokens + kBwdKeys - 1) / kBwdKeys),
                       static_cast<unsigned>(a.kv_heads));
    attention_backward_dkdv_kernel<<<grid_kv, kThreads, kDkdvSmem, stream>>>(
        dk, dv, a.q, a.k, a.v, d_o, lse, delta, a.cu_seqlens, geo);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (cudaError_t e = set_smem(attention_backward_dq_kernel, kDqSmem); e != cudaSuccess) return e;
    const dim3 grid_q(static_cast<unsigned>((a.tokens + kDqRows - 1) / kDqRows),
                      static_cast<unsigned>(a.q_heads));
    attention_backward_dq_kernel<<<grid_q, kThreads, kDqSmem, stream>>>(dq, a.q, a.k, a.v, d_o, lse,
                                                                        delta, a.cu_seqlens, geo);
    return cudaGetLastError();
}

}  // namespace deltatune
