// The recurrences of the chunked gated delta rule on mma.sync, with the state in registers (see
// gdn_chunked_rule.cu for the math; gdn_chunked_rule_recurrence.cuh says which runs when). Per
// chunk, for one value head and a slice of kBV value columns:
//   Vn = U - W S;  O = Qd S + Aqk Vn;  S <- gam S + Kd^T Vn.
// The fp32 state lives in the warps' mma accumulators (warp w owns rows [w * kSRows, ...) of the
// slice) and is never rounded; the products read a bf16 shadow of it and a bf16 Vn from shared
// memory on bf16 m16n8k16 mma, as flash-linear-attention's state pass does. That halves the
// dependent tensor-core steps of every chunk against fp32 operands on tf32 mma, and the chunk
// steps' latency is what bounds this kernel. Each chunk's tiles are copied in (double-buffered)
// while the previous chunk computes: two barriers per chunk.
#pragma once

#include "kernels/gdn/gdn_chunked_rule_common.cuh"

namespace deltatune {
namespace {

// Geometry of the register-state recurrences for kBV value columns per block: kBV / 8 warps,
// each owning kD / warps rows of the state and one 16 x 32 tile of the chunk's 64 x kBV results.
template <int kBV>
struct RegRec {
    static constexpr int kWarps = kBV / 8;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kSRows = kD / kWarps;
    static constexpr int kSFm = kSRows / 16;
    static constexpr int kSFn = kBV / 8;
    // bf16 rows kBV wide read by ldmatrix: a stride of an odd number of 16-byte units puts the
    // eight rows of a fragment load on eight different bank groups.
    static constexpr int kLdS = kBV + 8;
    static_assert(kBV == 32 || kBV == 64, "4 or 8 warps");
    static_assert((kLdS / 8) % 2 == 1);
    // This warp's tile of a 64 x kBV chunk result: row block warp % 4, column block warp / 4.
    __device__ static int tile_row() { return 16 * ((threadIdx.x >> 5) & 3); }
    __device__ static int tile_col() { return 32 * (threadIdx.x >> 7); }
    __device__ static int state_row() { return (threadIdx.x >> 5) * kSRows; }
};

template <int kBV>
struct ForwardRecSmem {
    __nv_bfloat16 W[2][kC * kLdB];  // kC x kD, by chunk parity
    __nv_bfloat16 Kd[2][kC * kLdB];
    __nv_bfloat16 Qd[2][kC * kLdB];
    __nv_bfloat16 Aqk[2][kC * kLdBS];            // kC x kC
    __nv_bfloat16 S[2][kD * RegRec<kBV>::kLdS];  // bf16 shadow of the entering state
    __nv_bfloat16 V[kC * RegRec<kBV>::kLdS];     // bf16 Vn
};

// A warp's m16n8 accumulator tile, fm x fn fragments.
template <int kFm, int kFn>
using Acc = float[kFm][kFn][4];

// f(row, col, x0, x1) for each pair of adjacent columns a lane holds in a register tile at
// (m0, n0) (layout at cuda::mma_bf16).
template <int kFm, int kFn, typename F>
__device__ __forceinline__ void for_each_acc_pair(Acc<kFm, kFn>& acc, int m0, int n0, F&& f) {
    const int col = n0 + 2 * (threadIdx.x & 3);
#pragma unroll
    for (int fm = 0; fm < kFm; ++fm) {
#pragma unroll
        for (int fn = 0; fn < kFn; ++fn) {
#pragma unroll
            for (int i = 0; i < 4; i += 2) {
                f(cuda::fragment_row(m0, fm, i), col + fn * 8, acc[fm][fn][i], acc[fm][fn][i + 1]);
            }
        }
    }
}

template <int kFm, int kFn>
__device__ __forceinline__ void scale_acc(Acc<kFm, kFn>& acc, float x) {
#pragma unroll
    for (int i = 0; i < kFm; ++i) {
#pragma unroll
        for (int j = 0; j < kFn; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] *= x;
        }
    }
}

__device__ __forceinline__ void store_bf16_pair(__nv_bfloat16* p, float x0, float x1) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x0, x1);
}

// Starts copying chunk tile `tile`'s W, Kd (and with the output Qd, Aqk) into buffer b.
template <int kBV>
__device__ __forceinline__ void copy_forward_tiles(ForwardRecSmem<kBV>& sm, int b, const Ws& ws,
                                                   int64_t tile, bool out) {
    constexpr int kBlock = RegRec<kBV>::kThreads;
    copy_tile<kBlock, kC, kD, kLdB>(sm.W[b], ws.W + tile * kTile);
    copy_tile<kBlock, kC, kD, kLdB>(sm.Kd[b], ws.Kd + tile * kTile);
    if (out) {
        copy_tile<kBlock, kC, kD, kLdB>(sm.Qd[b], ws.Qd + tile * kTile);
        copy_tile<kBlock, kC, kC, kLdBS>(sm.Aqk[b], ws.Aqk + tile * kSquare);
    }
}

// This warp's 16 x 32 tile of U (bf16, global) at chunk tile `tile`, as raw bf16 pairs in
// for_each_acc_pair's order. Loaded a chunk ahead and converted only where used (neg_u): a
// conversion right after the load would stall the warp for the load's whole latency.
template <int kBV>
__device__ __forceinline__ void load_u(uint32_t (&raw)[8], const __nv_bfloat16* U, int64_t tile,
                                       int v0) {
    const __nv_bfloat16* base = U + tile * kTile + v0;
    const int m0 = RegRec<kBV>::tile_row();
    const int col = RegRec<kBV>::tile_col() + 2 * (threadIdx.x & 3);
#pragma unroll
    for (int fn = 0; fn < 4; ++fn) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            raw[fn * 2 + h] = *reinterpret_cast<const uint32_t*>(
                base + cuda::fragment_row(m0, 0, 2 * h) * kD + col + fn * 8);
        }
    }
}

// vn = -U from load_u's pairs: the start of -(U - W S) = W S - U, so the product accumulates
// onto it.
__device__ __forceinline__ void neg_u(Acc<1, 4>& vn, const uint32_t (&raw)[8]) {
#pragma unroll
    for (int fn = 0; fn < 4; ++fn) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float2 v =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw[fn * 2 + h]));
            vn[0][fn][2 * h] = -v.x;
            vn[0][fn][2 * h + 1] = -v.y;
        }
    }
}

// Forward recurrence for value head blockIdx.x, dv columns [v0, v0 + kBV): the output when `out`
// is set, and with save_states each chunk's entering state and Vn (fp32, every row, zero past the
// end) for the backward.
template <int kBV>
__global__ void __launch_bounds__(RegRec<kBV>::kThreads)
    gdn_recurrence_forward_kernel(__nv_bfloat16* out, Ws ws, int32_t tokens, int v_heads,
                                  bool save_states) {
    using G = RegRec<kBV>;
    constexpr int kLdS = G::kLdS;
    extern __shared__ __align__(128) unsigned char rec_smem_raw[];
    auto& sm = *reinterpret_cast<ForwardRecSmem<kBV>*>(rec_smem_raw);
    const int h = blockIdx.x, v0 = blockIdx.y * kBV;
    const int s0 = G::state_row(), m0 = G::tile_row(), n0 = G::tile_col();
    const int chunks = static_cast<int>(num_chunks(tokens));
    auto tile_of = [&](int c) { return static_cast<int64_t>(c) * v_heads + h; };
    Acc<G::kSFm, G::kSFn> S = {};
    uint32_t u_raw[8];
    copy_forward_tiles(sm, 0, ws, tile_of(0), out != nullptr);
    load_u<kBV>(u_raw, ws.U, tile_of(0), v0);
    float gam = ws.gam[tile_of(0)];
    for (int c = 0; c < chunks; ++c) {
        const int b = c & 1;
        const int64_t tile = tile_of(c);
        // The entering state's bf16 shadow, for this chunk's products and the backward's.
        __nv_bfloat16* saved = save_states ? ws.h + tile * kState + v0 : nullptr;
        for_each_acc_pair<G::kSFm, G::kSFn>(S, s0, 0, [&](int r, int col, float& x0, float& x1) {
            const __nv_bfloat162 x = __floats2bfloat162_rn(x0, x1);
            *reinterpret_cast<__nv_bfloat162*>(sm.S[b] + r * kLdS + col) = x;
            if (saved) *reinterpret_cast<__nv_bfloat162*>(saved + r * kD + col) = x;
        });
        copies_wait();
        __syncthreads();  // the shadow and this chunk's tiles are in; chunk c - 1 is done
        if (c + 1 < chunks) copy_forward_tiles(sm, b ^ 1, ws, tile_of(c + 1), out != nullptr);

        // Vn = U - W S: this warp's 16 x 32 tile, in bf16 for the products and the backward.
        Acc<1, 4> vn;
        neg_u(vn, u_raw);
        cuda::warp_tile_mma<kN, kN, 1, 4, kD, kLdB, kLdS>(vn, sm.W[b], sm.S[b], m0, n0);
        __nv_bfloat16* vn_saved = save_states ? ws.Vn + tile * kTile + v0 : nullptr;
        for_each_acc_pair<1, 4>(vn, m0, n0, [&](int r, int col, float& x0, float& x1) {
            const __nv_bfloat162 x = __floats2bfloat162_rn(-x0, -x1);
            *reinterpret_cast<__nv_bfloat162*>(sm.V + r * kLdS + col) = x;
            if (vn_saved) *reinterpret_cast<__nv_bfloat162*>(vn_saved + r * kD + col) = x;
        });
        const float chunk_gam = gam;
        if (c + 1 < chunks) {
            load_u<kBV>(u_raw, ws.U, tile_of(c + 1), v0);
            gam = ws.gam[tile_of(c + 1)];
        }
        __syncthreads();  // Vn is in

        // S <- gam S + Kd^T Vn on this warp's rows; O = Qd S + Aqk Vn on its tile.
        scale_acc(S, chunk_gam);
        cuda::warp_tile_mma<kT, kN, G::kSFm, G::kSFn, kC, kLdB, kLdS>(S, sm.Kd[b], sm.V, s0, 0);
        if (out) {
            Acc<1, 4> o = {};
            cuda::warp_tile_mma<kN, kN, 1, 4, kD, kLdB, kLdS>(o, sm.Qd[b], sm.S[b], m0, n0);
            cuda::warp_tile_mma<kN, kN, 1, 4, kC, kLdBS, kLdS>(o, sm.Aqk[b], sm.V, m0, n0);
            const int32_t c0 = c * kC;
            for_each_acc_pair<1, 4>(o, m0, n0, [&](int r, int col, float& x0, float& x1) {
                if (c0 + r < tokens) {
                    store_bf16_pair(
                        out + (static_cast<int64_t>(c0 + r) * v_heads + h) * kD + v0 + col, x0, x1);
                }
            });
        }
    }
}

template <int kBV>
struct ReverseRecSmem {
    __nv_bfloat16 Aqk[2][kC * kLdBS];  // kC x kC, by chunk parity
    __nv_bfloat16 Kd[2][kC * kLdB];    // kC x kD
    __nv_bfloat16 Qd[2][kC * kLdB];
    __nv_bfloat16 W[2][kC * kLdB];
    __nv_bfloat16 dO[2][kC * RegRec<kBV>::kLdS];  // kC x kBV
    __nv_bfloat16 dS[2][kD * RegRec<kBV>::kLdS];  // bf16 shadow of the leaving-state gradient
    __nv_bfloat16 dV[kC * RegRec<kBV>::kLdS];     // bf16 -dVn
};

// Starts copying chunk c's operands of the reverse recurrence into buffer b: Aqk, Kd, Qd, W and
// value head h's dO columns [v0, v0 + kBV) (rows past the end of the stream zeroed).
template <int kBV>
__device__ __forceinline__ void copy_reverse_tiles(ReverseRecSmem<kBV>& sm, int b, const Ws& ws,
                                                   int64_t tile, const __nv_bfloat16* dout, int c,
                                                   int32_t tokens, int v_heads, int h, int v0) {
    constexpr int kLdS = RegRec<kBV>::kLdS;
    constexpr int kBlock = RegRec<kBV>::kThreads;
    copy_tile<kBlock, kC, kC, kLdBS>(sm.Aqk[b], ws.Aqk + tile * kSquare);
    copy_tile<kBlock, kC, kD, kLdB>(sm.Kd[b], ws.Kd + tile * kTile);
    copy_tile<kBlock, kC, kD, kLdB>(sm.Qd[b], ws.Qd + tile * kTile);
    copy_tile<kBlock, kC, kD, kLdB>(sm.W[b], ws.W + tile * kTile);
    const int32_t c0 = c * kC;
    const int64_t stride = int64_t{v_heads} * kD;
    copy_rows<kBlock, kC, kBV, kLdS>(
        sm.dO[b], dout + static_cast<int64_t>(c0) * stride + h * kD + v0, stride, tokens - c0);
}

// Reverse recurrence for value head blockIdx.x, dv columns [v0, v0 + kBV), from the last chunk
// to the first: dVn = Aqk^T dO + Kd dS;  dS <- gam dS + Qd^T dO - W^T dVn, where dS is the
// gradient of the state leaving the chunk (saved as dh, fp32, before the update) and dVn is
// saved bf16. dS stays fp32 in the warps' accumulators; the products read bf16 shadows.
template <int kBV>
__global__ void __launch_bounds__(RegRec<kBV>::kThreads)
    gdn_recurrence_backward_kernel(Ws ws, const __nv_bfloat16* dout, int32_t tokens, int v_heads) {
    using G = RegRec<kBV>;
    constexpr int kLdS = G::kLdS;
    extern __shared__ __align__(128) unsigned char rec_smem_raw[];
    auto& sm = *reinterpret_cast<ReverseRecSmem<kBV>*>(rec_smem_raw);
    const int h = blockIdx.x, v0 = blockIdx.y * kBV;
    const int s0 = G::state_row(), m0 = G::tile_row(), n0 = G::tile_col();
    const int chunks = static_cast<int>(num_chunks(tokens));
    auto tile_of = [&](int c) { return static_cast<int64_t>(c) * v_heads + h; };
    Acc<G::kSFm, G::kSFn> dS = {};
    copy_reverse_tiles(sm, (chunks - 1) & 1, ws, tile_of(chunks - 1), dout, chunks - 1, tokens,
                       v_heads, h, v0);
    float gam = ws.gam[tile_of(chunks - 1)];
    for (int c = chunks - 1; c >= 0; --c) {
        const int b = c & 1;
        const int64_t tile = tile_of(c);
        float* dh = ws.dh + tile * kState + v0;
        for_each_acc_pair<G::kSFm, G::kSFn>(dS, s0, 0, [&](int r, int col, float& x0, float& x1) {
            store_bf16_pair(sm.dS[b] + r * kLdS + col, x0, x1);
            *reinterpret_cast<float2*>(dh + r * kD + col) = make_float2(x0, x1);
        });
        copies_wait();
        __syncthreads();  // the shadow and this chunk's operands are in; chunk c + 1 is done
        if (c > 0) {
            copy_reverse_tiles(sm, b ^ 1, ws, tile_of(c - 1), dout, c - 1, tokens, v_heads, h, v0);
        }

        // dVn = Aqk^T dO + Kd dS on this warp's 16 x 32 tile, in bf16: to the backward's
        // scratch, and negated for the state gradient's product.
        Acc<1, 4> dvn = {};
        cuda::warp_tile_mma<kT, kN, 1, 4, kC, kLdBS, kLdS>(dvn, sm.Aqk[b], sm.dO[b], m0, n0);
        cuda::warp_tile_mma<kN, kN, 1, 4, kD, kLdB, kLdS>(dvn, sm.Kd[b], sm.dS[b], m0, n0);
        __nv_bfloat16* dvn_out = ws.dVn + tile * kTile + v0;
        for_each_acc_pair<1, 4>(dvn, m0, n0, [&](int r, int col, float& x0, float& x1) {
            store_bf16_pair(dvn_out + r * kD + col, x0, x1);
            store_bf16_pair(sm.dV + r * kLdS + col, -x0, -x1);
        });
        const float chunk_gam = gam;
        if (c > 0) gam = ws.gam[tile_of(c - 1)];
        __syncthreads();  // -dVn is in

        // dS <- gam dS + Qd^T dO - W^T dVn on this warp's rows.
        scale_acc(dS, chunk_gam);
        cuda::warp_tile_mma<kT, kN, G::kSFm, G::kSFn, kC, kLdB, kLdS>(dS, sm.Qd[b], sm.dO[b], s0,
                                                                      0);
        cuda::warp_tile_mma<kT, kN, G::kSFm, G::kSFn, kC, kLdB, kLdS>(dS, sm.W[b], sm.dV, s0, 0);
    }
}

template <int kBV>
cudaError_t launch_recurrence_backward_bv(const Ws& w, const __nv_bfloat16* dout, int32_t tokens,
                                          int v_heads, cudaStream_t stream) {
    auto* kernel = gdn_recurrence_backward_kernel<kBV>;
    constexpr size_t kSmem = sizeof(ReverseRecSmem<kBV>);
    if (cudaError_t e = set_smem(kernel, kSmem); e != cudaSuccess) return e;
    kernel<<<dim3(static_cast<unsigned>(v_heads), kD / kBV), RegRec<kBV>::kThreads, kSmem,
             stream>>>(w, dout, tokens, v_heads);
    return cudaGetLastError();
}

}  // namespace
}  // namespace deltatune
