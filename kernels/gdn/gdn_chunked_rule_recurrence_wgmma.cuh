// The recurrences of the chunked gated delta rule for 64-column blocks on wgmma (chosen in
// gdn_chunked_rule_recurrence.cuh; the math is gdn_recurrence_forward_kernel's and
// gdn_recurrence_backward_kernel's). The mma.sync versions are bound by the shared-memory pipe:
// their eight warps re-read the same operand fragments (2,432 of about 3,970 wavefronts per
// reverse chunk step). Here each of the two warpgroups reads an operand tile once. The
// accumulators stay where the mma.sync versions keep them: a warpgroup's m64 result gives warp w
// rows 16 (w % 4).., the rows and columns each warp owns there.
//
// Tiles are 128-byte swizzled 64-column chunks (kernels/common/hopper.cuh): row r of a chunk is
// 128 bytes at r * 128, its 16-byte unit u at (u ^ (r % 8)) * 16.
#pragma once

#include "kernels/common/hopper.cuh"
#include "kernels/gdn/gdn_chunked_rule_common.cuh"
#include "kernels/gdn/gdn_chunked_rule_recurrence_mma.cuh"

namespace deltatune {
namespace {

// Byte offset of element (row, col) in a swizzled tile of kRows rows (64-column chunks).
template <int kRows>
__device__ __forceinline__ int sw_offset(int row, int col) {
    return (col >> 6) * (kRows * 128) + row * 128 + ((((col & 63) >> 3) ^ (row & 7)) << 4) +
           (col & 7) * 2;
}

// copy_rows_to into a swizzled tile of kRows rows.
template <int kBlock, int kRows, int kCols>
__device__ __forceinline__ void copy_swizzled(unsigned char* dst, const __nv_bfloat16* src,
                                              int64_t stride, int valid) {
    copy_rows_to<kBlock, kRows, kCols>(
        [&](int row, int col) { return dst + sw_offset<kRows>(row, col); }, src, stride, valid);
}

constexpr int kSwChunkBytes = kC * 128;  // bytes of a 64-row, 64-column swizzled chunk
constexpr int kWgThreads = 256;          // two warpgroups
constexpr int kWgColumns = 64;           // value columns per block

// Per buffer (chunk parity): Aqk (64 x 64), Kd, Qd, W (64 x 128: two chunks each), dO's 64
// columns; then the bf16 shadow of the state gradient (128 x 64) by parity and -dVn (64 x 64).
struct WgReverseSmem {
    unsigned char Aqk[2][kSwChunkBytes];
    unsigned char Kd[2][2 * kSwChunkBytes];
    unsigned char Qd[2][2 * kSwChunkBytes];
    unsigned char W[2][2 * kSwChunkBytes];
    unsigned char dO[2][kSwChunkBytes];
    unsigned char dS[2][2 * kSwChunkBytes];
    unsigned char dV[kSwChunkBytes];
};
constexpr size_t kWgReverseSmem = sizeof(WgReverseSmem) + 1024;  // + alignment

// Starts copying chunk c's operands into buffer b, swizzled: Aqk, Kd, Qd, W and value head h's dO
// columns [v0, v0 + 64) (rows past the end of the stream zeroed).
__device__ __forceinline__ void copy_wg_reverse_tiles(WgReverseSmem& sm, int b, const Ws& ws,
                                                      int64_t tile, const __nv_bfloat16* dout,
                                                      int c, int32_t tokens, int v_heads, int h,
                                                      int v0) {
    copy_swizzled<kWgThreads, kC, kC>(sm.Aqk[b], ws.Aqk + tile * kSquare, kC, kC);
    copy_swizzled<kWgThreads, kC, kD>(sm.Kd[b], ws.Kd + tile * kTile, kD, kC);
    copy_swizzled<kWgThreads, kC, kD>(sm.Qd[b], ws.Qd + tile * kTile, kD, kC);
    copy_swizzled<kWgThreads, kC, kD>(sm.W[b], ws.W + tile * kTile, kD, kC);
    const int32_t c0 = c * kC;
    const int64_t stride = int64_t{v_heads} * kD;
    copy_swizzled<kWgThreads, kC, kWgColumns>(
        sm.dO[b], dout + static_cast<int64_t>(c0) * stride + h * kD + v0, stride, tokens - c0);
}

// bf16 pair (x0, x1) at (row, col) of a swizzled tile of kRows rows.
template <int kRows>
__device__ __forceinline__ void store_sw_pair(unsigned char* tile, int row, int col, float x0,
                                              float x1) {
    *reinterpret_cast<__nv_bfloat162*>(tile + sw_offset<kRows>(row, col)) =
        __floats2bfloat162_rn(x0, x1);
}

// vn (this warpgroup's 64 x 32 columns) += X Y for X (kC x kD, swizzled) and Y (the kD x 64
// shadow, swizzled): Kd dS in the reverse, W S in the forward.
__device__ __forceinline__ void wg_rows_times_state(float (&vn)[16], const unsigned char* X,
                                                    const unsigned char* Y, int g) {
    using namespace hopper;
    const uint64_t x = sw128_desc(smem_addr(X), 16, 1024);
    const uint64_t y_cols = sw128_desc(smem_addr(Y) + 64 * g, 2 * kSwChunkBytes, 1024);
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
        wgmma_m64n32k16_ss_t<0, 1>(vn, desc_at(x, (kk / 4) * kSwChunkBytes + (kk % 4) * 32),
                                   desc_at(y_cols, kk * 2048));
    }
}

// dVn (this warpgroup's 64 x 32 columns) = Aqk^T dO + Kd dS, on wgmma.
__device__ __forceinline__ void wg_dvn(float (&dvn)[16], const WgReverseSmem& sm, int b, int g) {
    using namespace hopper;
    const uint64_t aqk_t = sw128_desc(smem_addr(sm.Aqk[b]), kSwChunkBytes, 1024);
    const uint64_t do_cols = sw128_desc(smem_addr(sm.dO[b]) + 64 * g, kSwChunkBytes, 1024);
#pragma unroll
    for (int kk = 0; kk < kC / 16; ++kk) {
        wgmma_m64n32k16_ss_t<1, 1>(dvn, desc_at(aqk_t, kk * 2048), desc_at(do_cols, kk * 2048));
    }
    wg_rows_times_state(dvn, sm.Kd[b], sm.dS[b], g);
}

// The state's (or its gradient's) rows 64g.. += X^T Y for X (kC x kD, swizzled) and Y (kC x 64,
// swizzled).
__device__ __forceinline__ void wg_state_update(float (&dS)[32], const unsigned char* X,
                                                const unsigned char* Y, int g) {
    using namespace hopper;
    const uint64_t xt = sw128_desc(smem_addr(X) + g * kSwChunkBytes, kSwChunkBytes, 1024);
    const uint64_t y = sw128_desc(smem_addr(Y), kSwChunkBytes, 1024);
#pragma unroll
    for (int kk = 0; kk < kC / 16; ++kk) {
        wgmma_m64n64k16_ss_t<1, 1>(dS, desc_at(xt, kk * 2048), desc_at(y, kk * 2048));
    }
}

// Per buffer (chunk parity): W and Kd (64 x 128: two chunks each) and the bf16 shadow of the
// entering state (128 x 64); then Vn (64 x 64).
struct WgForwardSmem {
    unsigned char W[2][2 * kSwChunkBytes];
    unsigned char Kd[2][2 * kSwChunkBytes];
    unsigned char S[2][2 * kSwChunkBytes];
    unsigned char V[kSwChunkBytes];
};
constexpr size_t kWgForwardSmem = sizeof(WgForwardSmem) + 1024;  // + alignment

__device__ __forceinline__ void copy_wg_forward_tiles(WgForwardSmem& sm, int b, const Ws& ws,
                                                      int64_t tile) {
    copy_swizzled<kWgThreads, kC, kD>(sm.W[b], ws.W + tile * kTile, kD, kC);
    copy_swizzled<kWgThreads, kC, kD>(sm.Kd[b], ws.Kd + tile * kTile, kD, kC);
}

// The saving forward recurrence for value head blockIdx.x, dv columns [v0, v0 + 64): see
// gdn_recurrence_forward_kernel (with save_states, no output). Warpgroup g computes Vn's columns
// 32g.. (W S - U, m64 n32) and the state's rows 64g.. (Kd^T Vn, m64 n64), warp w of it rows
// 16 (w % 4).. of each.
__global__ void __launch_bounds__(kWgThreads)
    gdn_recurrence_forward_wgmma_kernel(Ws ws, int32_t tokens, int v_heads) {
#if DT_HOPPER_CODE
    extern __shared__ __align__(128) unsigned char wg_fwd_smem_raw[];
    auto& sm = *reinterpret_cast<WgForwardSmem*>(hopper::align1024(wg_fwd_smem_raw));
    // The mma.sync kernel's per-warp rows and tiles (load_u reads U by them); n0 is
    // G::tile_col() from the warp-uniform warpgroup index.
    using G = RegRec<kWgColumns>;
    const int h = blockIdx.x, v0 = blockIdx.y * kWgColumns, g = hopper::warpgroup_index();
    const int s0 = G::state_row(), m0 = G::tile_row(), n0 = 32 * g;
    const int chunks = static_cast<int>(num_chunks(tokens));
    auto tile_of = [&](int c) { return static_cast<int64_t>(c) * v_heads + h; };
    float S[32] = {};
    auto& S_acc = *reinterpret_cast<Acc<1, 8>*>(S);
    uint32_t u_raw[8];
    copy_wg_forward_tiles(sm, 0, ws, tile_of(0));
    load_u<kWgColumns>(u_raw, ws.U, tile_of(0), v0);
    float gam = ws.gam[tile_of(0)];
    for (int c = 0; c < chunks; ++c) {
        const int b = c & 1;
        const int64_t tile = tile_of(c);
        __nv_bfloat16* saved = ws.h + tile * kState + v0;
        for_each_acc_pair<1, 8>(S_acc, s0, 0, [&](int r, int col, float& x0, float& x1) {
            const __nv_bfloat162 x = __floats2bfloat162_rn(x0, x1);
            *reinterpret_cast<__nv_bfloat162*>(sm.S[b] + sw_offset<kD>(r, col)) = x;
            *reinterpret_cast<__nv_bfloat162*>(saved + r * kD + col) = x;
        });
        copies_wait();
        hopper::fence_proxy_async_smem();  // the shadow and the copies, for wgmma's reads
        __syncthreads();  // the shadow and this chunk's tiles are in; chunk c - 1 is done
        if (c + 1 < chunks) copy_wg_forward_tiles(sm, b ^ 1, ws, tile_of(c + 1));

        // -Vn = W S - U on this warpgroup's columns, in bf16 for the products and the backward.
        float vn[16];
        auto& vn_acc = *reinterpret_cast<Acc<1, 4>*>(vn);
        neg_u(vn_acc, u_raw);
        hopper::fence_regs(vn);
        hopper::wgmma_fence();
        wg_rows_times_state(vn, sm.W[b], sm.S[b], g);
        hopper::wgmma_commit();
        hopper::wgmma_wait<0>();
        hopper::fence_regs(vn);
        __nv_bfloat16* vn_saved = ws.Vn + tile * kTile + v0;
        for_each_acc_pair<1, 4>(vn_acc, m0, n0, [&](int r, int col, float& x0, float& x1) {
            const __nv_bfloat162 x = __floats2bfloat162_rn(-x0, -x1);
            *reinterpret_cast<__nv_bfloat162*>(sm.V + sw_offset<kC>(r, col)) = x;
            *reinterpret_cast<__nv_bfloat162*>(vn_saved + r * kD + col) = x;
        });
        if (c + 1 == chunks) break;  // nothing reads the state leaving the last chunk
        const float chunk_gam = gam;
        load_u<kWgColumns>(u_raw, ws.U, tile_of(c + 1), v0);
        gam = ws.gam[tile_of(c + 1)];
        hopper::fence_proxy_async_smem();  // Vn, for wgmma's reads
        __syncthreads();                   // Vn is in

        // S <- gam S + Kd^T Vn on this warpgroup's rows.
        scale_acc(S_acc, chunk_gam);
        hopper::fence_regs(S);
        hopper::wgmma_fence();
        wg_state_update(S, sm.Kd[b], sm.V, g);
        hopper::wgmma_commit();
        hopper::wgmma_wait<0>();
        hopper::fence_regs(S);
    }
#else
    __trap();  // never launched without sm_90a code (DT_HOPPER_CODE)
#endif
}

cudaError_t launch_recurrence_forward_wgmma(const Ws& w, int32_t tokens, int v_heads,
                                            cudaStream_t stream) {
    auto* kernel = gdn_recurrence_forward_wgmma_kernel;
    if (cudaError_t e = set_smem(kernel, kWgForwardSmem); e != cudaSuccess) return e;
    kernel<<<dim3(static_cast<unsigned>(v_heads), kD / kWgColumns), kWgThreads, kWgForwardSmem,
             stream>>>(w, tokens, v_heads);
    return cudaGetLastError();
}

// Reverse recurrence for value head blockIdx.x, dv columns [v0, v0 + 64): see
// gdn_recurrence_backward_kernel. Warpgroup g computes dVn's columns 32g.. and the state
// gradient's rows 64g.., warp w of it rows 16 (w % 4).. of each.
__global__ void __launch_bounds__(kWgThreads)
    gdn_recurrence_backward_wgmma_kernel(Ws ws, const __nv_bfloat16* dout, int32_t tokens,
                                         int v_heads) {
#if DT_HOPPER_CODE
    extern __shared__ __align__(128) unsigned char wg_rec_smem_raw[];
    auto& sm = *reinterpret_cast<WgReverseSmem*>(hopper::align1024(wg_rec_smem_raw));
    // The mma.sync kernel's per-warp rows and tiles (load_u reads U by them); n0 is
    // G::tile_col() from the warp-uniform warpgroup index.
    using G = RegRec<kWgColumns>;
    const int h = blockIdx.x, v0 = blockIdx.y * kWgColumns, g = hopper::warpgroup_index();
    const int s0 = G::state_row(), m0 = G::tile_row(), n0 = 32 * g;
    const int chunks = static_cast<int>(num_chunks(tokens));
    auto tile_of = [&](int c) { return static_cast<int64_t>(c) * v_heads + h; };
    float dS[32] = {};
    auto& dS_acc = *reinterpret_cast<Acc<1, 8>*>(dS);
    copy_wg_reverse_tiles(sm, (chunks - 1) & 1, ws, tile_of(chunks - 1), dout, chunks - 1, tokens,
                          v_heads, h, v0);
    float gam = ws.gam[tile_of(chunks - 1)];
    for (int c = chunks - 1; c >= 0; --c) {
        const int b = c & 1;
        const int64_t tile = tile_of(c);
        float* dh = ws.dh + tile * kState + v0;
        for_each_acc_pair<1, 8>(dS_acc, s0, 0, [&](int r, int col, float& x0, float& x1) {
            store_sw_pair<kD>(sm.dS[b], r, col, x0, x1);
            *reinterpret_cast<float2*>(dh + r * kD + col) = make_float2(x0, x1);
        });
        copies_wait();
        hopper::fence_proxy_async_smem();  // the shadow and the copies, for wgmma's reads
        __syncthreads();  // the shadow and this chunk's operands are in; chunk c + 1 is done
        if (c > 0) {
            copy_wg_reverse_tiles(sm, b ^ 1, ws, tile_of(c - 1), dout, c - 1, tokens, v_heads, h,
                                  v0);
        }

        float dvn[16] = {};
        hopper::fence_regs(dvn);
        hopper::wgmma_fence();
        wg_dvn(dvn, sm, b, g);
        hopper::wgmma_commit();
        hopper::wgmma_wait<0>();
        hopper::fence_regs(dvn);
        __nv_bfloat16* dvn_out = ws.dVn + tile * kTile + v0;
        auto& dvn_acc = *reinterpret_cast<Acc<1, 4>*>(dvn);
        for_each_acc_pair<1, 4>(dvn_acc, m0, n0, [&](int r, int col, float& x0, float& x1) {
            store_bf16_pair(dvn_out + r * kD + col, x0, x1);
            store_sw_pair<kC>(sm.dV, r, col, -x0, -x1);
        });
        const float chunk_gam = gam;
        if (c > 0) gam = ws.gam[tile_of(c - 1)];
        hopper::fence_proxy_async_smem();  // -dVn, for wgmma's reads
        __syncthreads();                   // -dVn is in

        // dS <- gam dS + Qd^T dO - W^T dVn on this warpgroup's rows.
        scale_acc(dS_acc, chunk_gam);
        hopper::fence_regs(dS);
        hopper::wgmma_fence();
        wg_state_update(dS, sm.Qd[b], sm.dO[b], g);
        wg_state_update(dS, sm.W[b], sm.dV, g);
        hopper::wgmma_commit();
        hopper::wgmma_wait<0>();
        hopper::fence_regs(dS);
    }
#else
    __trap();  // never launched without sm_90a code (DT_HOPPER_CODE)
#endif
}

cudaError_t launch_recurrence_backward_wgmma(const Ws& w, const __nv_bfloat16* dout, int32_t tokens,
                                             int v_heads, cudaStream_t stream) {
    if (cudaError_t e = set_smem(gdn_recurrence_backward_wgmma_kernel, kWgReverseSmem);
        e != cudaSuccess) {
        return e;
    }
    gdn_recurrence_backward_wgmma_kernel<<<dim3(static_cast<unsigned>(v_heads), kD / kWgColumns),
                                           kWgThreads, kWgReverseSmem, stream>>>(w, dout, tokens,
                                                                                 v_heads);
    return cudaGetLastError();
}

}  // namespace
}  // namespace deltatune
