// The chunked gated delta rule's recurrence as the forward and backward launch it: which of the
// two implementations runs (the state pass on mma.sync, gdn_chunked_rule_recurrence_mma.cuh, or on
// wgmma, gdn_chunked_rule_recurrence_wgmma.cuh), the output pass of a saving forward, and the
// forward's two launches (chunk_prep, then the recurrence). See gdn_chunked_rule.cu for the math.
#pragma once

#include "kernels/common/code_arch.h"
#include "kernels/gdn/gdn_chunked_rule_common.cuh"
#include "kernels/gdn/gdn_chunked_rule_recurrence_mma.cuh"
#include "kernels/gdn/gdn_chunked_rule_recurrence_wgmma.cuh"

namespace deltatune {
namespace {

// 64 when v_heads * kD / 32 blocks would not fit one wave of the GPU's SMs, else 32. Always 32
// without the sm_90a code: every 32-column kernel is mma.sync and fits an A100's shared memory.
inline int recurrence_columns(int64_t v_heads) {
    if (loaded_code().arch < kHopperCodeArch) return 32;
    int device = 0, sms = 132;
    if (cudaGetDevice(&device) == cudaSuccess) {
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    return v_heads * (kD / 32) > sms ? 64 : 32;
}

// The output of a saving forward, parallel over chunks and value heads: O = Qd S + Aqk Vn from
// the bf16 state and Vn the recurrence saved (the products and order of its in-loop output, so
// both give the same bits). Keeping the output off the serial loop halves what each of its chunk
// steps reads.
struct OutputSmem {
    __nv_bfloat16 Qd[kC * kLdB];  // kC x kD
    __nv_bfloat16 S[kD * kLdB];   // kD x kD
    __nv_bfloat16 Aqk[kC * kLdBS];
    __nv_bfloat16 V[kC * kLdB];  // Vn, kC x kD
};
constexpr int kOutputThreads = 256;  // eight warps, one 32 x 32 tile of O each

__global__ void __launch_bounds__(kOutputThreads, 2)
    gdn_output_kernel(__nv_bfloat16* out, Ws ws, int32_t tokens, int v_heads) {
    extern __shared__ __align__(128) unsigned char out_smem_raw[];
    auto& sm = *reinterpret_cast<OutputSmem*>(out_smem_raw);
    const int c = blockIdx.x, h = blockIdx.y;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    copy_tile<kOutputThreads, kC, kD, kLdB>(sm.Qd, ws.Qd + tile * kTile);
    copy_tile<kOutputThreads, kD, kD, kLdB>(sm.S, ws.h + tile * kState);
    copy_tile<kOutputThreads, kC, kC, kLdBS>(sm.Aqk, ws.Aqk + tile * kSquare);
    copy_tile<kOutputThreads, kC, kD, kLdB>(sm.V, ws.Vn + tile * kTile);
    copies_wait();
    __syncthreads();
    const int warp = threadIdx.x >> 5, m0 = 32 * (warp >> 2), n0 = 32 * (warp & 3);
    Acc<2, 4> o = {};
    cuda::warp_tile_mma<kN, kN, 2, 4, kD, kLdB, kLdB>(o, sm.Qd, sm.S, m0, n0);
    cuda::warp_tile_mma<kN, kN, 2, 4, kC, kLdBS, kLdB>(o, sm.Aqk, sm.V, m0, n0);
    const int32_t c0 = c * kC;
    for_each_acc_pair<2, 4>(o, m0, n0, [&](int r, int col, float& x0, float& x1) {
        if (c0 + r < tokens) {
            store_bf16_pair(out + (static_cast<int64_t>(c0 + r) * v_heads + h) * kD + col, x0, x1);
        }
    });
}

cudaError_t launch_output(__nv_bfloat16* out, const Ws& w, int64_t tokens, int64_t v_heads,
                          cudaStream_t stream) {
    constexpr size_t kSmem = sizeof(OutputSmem);
    if (cudaError_t e = set_smem(gdn_output_kernel, kSmem); e != cudaSuccess) return e;
    const dim3 grid(static_cast<unsigned>(num_chunks(tokens)), static_cast<unsigned>(v_heads));
    gdn_output_kernel<<<grid, kOutputThreads, kSmem, stream>>>(out, w, static_cast<int32_t>(tokens),
                                                               static_cast<int>(v_heads));
    return cudaGetLastError();
}

template <int kBV>
cudaError_t launch_recurrence_bv(__nv_bfloat16* out, const Ws& w, int64_t tokens, int64_t v_heads,
                                 bool save_states, cudaStream_t stream) {
    auto* kernel = gdn_recurrence_forward_kernel<kBV>;
    constexpr size_t kSmem = sizeof(ForwardRecSmem<kBV>);
    if (cudaError_t e = set_smem(kernel, kSmem); e != cudaSuccess) return e;
    const dim3 grid(static_cast<unsigned>(v_heads), kD / kBV);
    kernel<<<grid, RegRec<kBV>::kThreads, kSmem, stream>>>(out, w, static_cast<int32_t>(tokens),
                                                           static_cast<int>(v_heads), save_states);
    return cudaGetLastError();
}

// The recurrence, and the output: in its loop when nothing is saved, else from what it saved.
// A saving forward of 64-column blocks runs on wgmma (gdn_chunked_rule_recurrence_wgmma.cuh).
cudaError_t launch_recurrence(__nv_bfloat16* out, const Ws& w, int64_t tokens, int64_t v_heads,
                              bool save_states, cudaStream_t stream) {
    cudaError_t e = cudaSuccess;
    if (recurrence_columns(v_heads) == 32) {
        e = launch_recurrence_bv<32>(save_states ? nullptr : out, w, tokens, v_heads, save_states,
                                     stream);
    } else if (save_states) {
        e = launch_recurrence_forward_wgmma(w, static_cast<int32_t>(tokens),
                                            static_cast<int>(v_heads), stream);
    } else {
        e = launch_recurrence_bv<64>(out, w, tokens, v_heads, false, stream);
    }
    if (e != cudaSuccess) return e;
    return save_states && out ? launch_output(out, w, tokens, v_heads, stream) : cudaSuccess;
}

// 64-column blocks run on wgmma (gdn_chunked_rule_recurrence_wgmma.cuh), 32-column ones (one
// warpgroup, the state's rows then not a warpgroup's m64 layout) on mma.sync.
cudaError_t launch_recurrence_backward(const Ws& w, const __nv_bfloat16* dout, int32_t tokens,
                                       int v_heads, cudaStream_t stream) {
    return recurrence_columns(v_heads) == 64
               ? launch_recurrence_backward_wgmma(w, dout, tokens, v_heads, stream)
               : launch_recurrence_backward_bv<32>(w, dout, tokens, v_heads, stream);
}

// The forward's two launches: chunk_prep into `w`, then the recurrence writing `out` (when set)
// and, with save_states, each chunk's entering state and Vn for the backward.
cudaError_t launch_forward(__nv_bfloat16* out, bool save_states, const Ws& w,
                           const GatedDeltaRuleArgs& x, cudaStream_t stream) {
    if (cudaError_t e = launch_prep(w, x, stream); e != cudaSuccess) return e;
    return launch_recurrence(out, w, x.tokens, x.v_heads, save_states, stream);
}

}  // namespace
}  // namespace deltatune
