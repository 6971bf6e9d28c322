// The gated delta rule's backward (see gdn_chunked_rule.cu for the math): the replayed forward,
// the reverse recurrence, per-chunk state gradients, and the chunk_prep backward through T, the
// masks, the gates and the L2 norm.
#include "kernels/gdn/gdn_chunked_rule_prep_backward.cuh"
#include "kernels/gdn/gdn_chunked_rule_recurrence.cuh"

namespace deltatune {
namespace {

// bf16 tiles, small enough for three blocks per multiprocessor: the kernel waits on its loads.
struct StateGradSmem {
    __nv_bfloat16 dO[kC * kLdB];  // kC x kD
    __nv_bfloat16 V[kC * kLdB];   // dVn, then Vn
    __nv_bfloat16 S[kD * kLdB];   // the entering state, then the leaving-state gradient
    float scratch[32];
};
constexpr size_t kStateGradSmem = sizeof(StateGradSmem);
// What gdn_chunked_rule.h tells the kernel choice: the most any kernel of the portable path takes.
static_assert(std::max({kPrepSmem, kPrepBwdSmem, kStateGradSmem, sizeof(OutputSmem),
                        sizeof(ForwardRecSmem<32>), sizeof(ReverseRecSmem<32>)}) ==
              kGatedDeltaRulePortableSmemBytes);
constexpr int kStateGradBlocks = 3;

// dgam = <S, dS> over the bf16 state in shared memory and the fp32 gradient dh (global), then dS
// replaces S, rounded to bf16 for the dKd product; half the loads in flight at a time.
__device__ float state_dot_and_swap(__nv_bfloat16* sS, const float* dh, float* scratch) {
    constexpr int kParts = 2, kVecs = kState / 4, kPer = kVecs / kThreads / kParts;
    const float4* dh4 = reinterpret_cast<const float4*>(dh);
    float dot = 0.0f;
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
        float4 d[kPer];
#pragma unroll
        for (int j = 0; j < kPer; ++j) d[j] = dh4[threadIdx.x + (part * kPer + j) * kThreads];
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
            const int i = threadIdx.x + (part * kPer + j) * kThreads;
            __nv_bfloat16* p = sS + (i / (kD / 4)) * kLdB + (i % (kD / 4)) * 4;
            float s[4];
            cuda::unpack4(*reinterpret_cast<const uint2*>(p), s);
            dot += s[0] * d[j].x + s[1] * d[j].y + s[2] * d[j].z + s[3] * d[j].w;
            const float f[4] = {d[j].x, d[j].y, d[j].z, d[j].w};
            cuda::store4(p, f);
        }
    }
    return cuda::block_sum(dot, scratch);
}

// Per chunk and value head, from the entering state S and the leaving-state gradient dS:
// dQd = dO S^T, dW = -dVn S^T, dKd = Vn dS^T, dAqk = dO Vn^T, dgam = <S, dS>. Products on bf16
// tiles (dO, S, dVn, Vn are bf16 already; dS is rounded), fp32 accumulation.
__global__ void __launch_bounds__(kThreads, kStateGradBlocks)
    gdn_state_grads_kernel(Ws ws, const __nv_bfloat16* dout, int32_t tokens, int v_heads) {
    extern __shared__ __align__(128) unsigned char state_grad_smem[];
    StateGradSmem& sm = *reinterpret_cast<StateGradSmem*>(state_grad_smem);
    const int c = blockIdx.x, h = blockIdx.y;
    const int32_t c0 = c * kC;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    copy_tile<kThreads, kC, kD, kLdB>(sm.V, ws.dVn + tile * kTile);
    copy_tile<kThreads, kD, kD, kLdB>(sm.S, ws.h + tile * kState);
    copy_rows<kThreads, kC, kD, kLdB>(sm.dO, dout + (static_cast<int64_t>(c0) * v_heads + h) * kD,
                                      int64_t{v_heads} * kD, tokens - c0);
    copies_wait();
    __syncthreads();
    mm_bf16<kN, kT, kC, kD, kD, kLdB, kLdB, kD>(ws.dQd + tile * kTile, sm.dO, sm.S, 1.0f, 0.0f);
    mm_bf16<kN, kT, kC, kD, kD, kLdB, kLdB, kD>(ws.dW + tile * kTile, sm.V, sm.S, -1.0f, 0.0f);
    __syncthreads();
    copy_tile<kThreads, kC, kD, kLdB>(sm.V, ws.Vn + tile * kTile);
    const float dot = state_dot_and_swap(sm.S, ws.dh + tile * kState, sm.scratch);
    copies_wait();
    __syncthreads();
    mm_bf16<kN, kT, kC, kD, kD, kLdB, kLdB, kD>(ws.dKd + tile * kTile, sm.V, sm.S, 1.0f, 0.0f);
    mm_bf16<kN, kT, kC, kC, kD, kLdB, kLdB, kC>(ws.dAqk + tile * kSquare, sm.dO, sm.V, 1.0f, 0.0f);
    if (threadIdx.x == 0) ws.dgam[tile] = dot;
}

// dq, dk of key head kh at token t: sum the value heads' dQn, dKn in head order, then the L2
// norm backward dx = r (dy - (dy . y) y). One warp per (token, key head); ldqk, ld_dqk: the row
// strides of q, k and of dq, dk.
__global__ void __launch_bounds__(kThreads)
    gdn_qk_finalize_kernel(__nv_bfloat16* dq, __nv_bfloat16* dk, int64_t ld_dqk, Ws ws,
                           const __nv_bfloat16* q, const __nv_bfloat16* k, int64_t ldqk,
                           int32_t tokens, int k_heads, int v_heads) {
    const int lane = threadIdx.x & 31;
    const int64_t item = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
    if (item >= static_cast<int64_t>(tokens) * k_heads) return;
    const int32_t t = static_cast<int32_t>(item / k_heads);
    const int kh = static_cast<int>(item % k_heads);
    const int ratio = v_heads / k_heads;
    const int c = t / kC, r = t % kC;
    for (int which = 0; which < 2; ++which) {
        const __nv_bfloat16* x = which == 0 ? q : k;
        const float* g = which == 0 ? ws.dQn : ws.dKn;
        float xv[kD / 32], gv[kD / 32];
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < kD / 32; ++i) {
            xv[i] = __bfloat162float(x[t * ldqk + kh * kD + lane + 32 * i]);
            ss += xv[i] * xv[i];
            gv[i] = 0.0f;
        }
        for (int j = 0; j < ratio; ++j) {
            const int64_t tile = static_cast<int64_t>(c) * v_heads + kh * ratio + j;
#pragma unroll
            for (int i = 0; i < kD / 32; ++i) gv[i] += g[tile * kTile + r * kD + lane + 32 * i];
        }
        const float rn = rsqrtf(cuda::warp_sum(ss) + kNormEps);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kD / 32; ++i) dot += gv[i] * xv[i] * rn;
        dot = cuda::warp_sum(dot);
        __nv_bfloat16* out = which == 0 ? dq : dk;
#pragma unroll
        for (int i = 0; i < kD / 32; ++i) {
            out[t * ld_dqk + kh * kD + lane + 32 * i] =
                __float2bfloat16_rn(rn * (gv[i] - dot * xv[i] * rn));
        }
    }
}

__global__ void gdn_gate_reduce_kernel(float* dA_log, float* ddt_bias, Ws ws, int chunks,
                                       int v_heads) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= v_heads) return;
    float sa = 0.0f, sd = 0.0f;
    for (int c = 0; c < chunks; ++c) {
        sa += ws.pA[static_cast<int64_t>(c) * v_heads + h];
        sd += ws.pdt[static_cast<int64_t>(c) * v_heads + h];
    }
    dA_log[h] += sa;
    ddt_bias[h] += sd;
}

bool grads_supported(const GatedDeltaRuleGrads& g, const GatedDeltaRuleArgs& x) {
    return stride_ok(g.dqkv_stride, std::max(x.k_heads, x.v_heads) * kD) &&
           reinterpret_cast<uintptr_t>(g.dv) % 4 == 0;  // dV is written in bf16 pairs
}

// The backward from workspace views `w`; `replay`: recompute the forward's part first.
cudaError_t backward_from(const Ws& w, bool replay, const GatedDeltaRuleGrads& g,
                          const __nv_bfloat16* dout, const GatedDeltaRuleArgs& x,
                          cudaStream_t stream) {
    const auto t32 = static_cast<int32_t>(x.tokens);
    const auto kh = static_cast<int>(x.k_heads), vh = static_cast<int>(x.v_heads);
    const auto chunks = static_cast<unsigned>(num_chunks(x.tokens));
    if (replay) {  // the chunk intermediates and the states, as a saving forward makes them
        if (cudaError_t e = launch_forward(nullptr, /*save_states=*/true, w, x, stream);
            e != cudaSuccess) {
            return e;
        }
    }
    if (cudaError_t e = launch_recurrence_backward(w, dout, t32, vh, stream); e != cudaSuccess) {
        return e;
    }
    if (cudaError_t e = set_smem(gdn_state_grads_kernel, kStateGradSmem); e != cudaSuccess) {
        return e;
    }
    if (cudaError_t e = cudaFuncSetAttribute(gdn_state_grads_kernel,
                                             cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared);
        e != cudaSuccess) {
        return e;
    }
    gdn_state_grads_kernel<<<dim3(chunks, vh), kThreads, kStateGradSmem, stream>>>(w, dout, t32,
                                                                                   vh);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (cudaError_t e = set_smem(gdn_chunk_prep_backward_kernel, kPrepBwdSmem); e != cudaSuccess) {
        return e;
    }
    gdn_chunk_prep_backward_kernel<<<dim3(chunks, vh), kPrepBwdThreads, kPrepBwdSmem, stream>>>(
        w, g.dv, g.da, g.db, row_stride(g.dqkv_stride, vh), x.q, x.k, x.v,
        row_stride(x.qkv_stride, kh), row_stride(x.qkv_stride, vh), x.a, x.b, x.A_log, x.dt_bias,
        x.cu_seqlens, x.num_docs, t32, kh, vh, x.scale);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    const int64_t items = x.tokens * x.k_heads;
    const auto blocks = static_cast<unsigned>((items + kThreads / 32 - 1) / (kThreads / 32));
    gdn_qk_finalize_kernel<<<blocks, kThreads, 0, stream>>>(
        g.dq, g.dk, row_stride(g.dqkv_stride, kh), w, x.q, x.k, row_stride(x.qkv_stride, kh), t32,
        kh, vh);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    gdn_gate_reduce_kernel<<<(vh + 127) / 128, 128, 0, stream>>>(g.dA_log, g.ddt_bias, w,
                                                                 static_cast<int>(chunks), vh);
    return cudaGetLastError();
}

}  // namespace

size_t gated_delta_rule_saved_bytes(int64_t tokens, int64_t v_heads) {
    size_t bytes = 0;
    carve_parts(nullptr, nullptr, tokens, v_heads, 1, &bytes);
    return bytes;
}

size_t gated_delta_rule_backward_scratch_bytes(int64_t tokens, int64_t v_heads) {
    return gated_delta_rule_backward_workspace_bytes(tokens, v_heads) -
           gated_delta_rule_saved_bytes(tokens, v_heads);
}

cudaError_t gated_delta_rule_forward_saving(__nv_bfloat16* out, const GatedDeltaRuleArgs& args,
                                            void* saved, size_t saved_bytes, cudaStream_t stream) {
    if (!args_supported(args)) return cudaErrorInvalidValue;
    if (args.tokens == 0) return cudaSuccess;
    if (saved_bytes < gated_delta_rule_saved_bytes(args.tokens, args.v_heads)) {
        return cudaErrorInvalidValue;
    }
    const Ws w = carve_parts(saved, nullptr, args.tokens, args.v_heads, 1, nullptr);
    return launch_forward(out, /*save_states=*/true, w, args, stream);
}

cudaError_t gated_delta_rule_backward_from_saved(const GatedDeltaRuleGrads& grads,
                                                 const __nv_bfloat16* dout,
                                                 const GatedDeltaRuleArgs& args, const void* saved,
                                                 void* workspace, size_t workspace_bytes,
                                                 cudaStream_t stream) {
    if (!args_supported(args) || !grads_supported(grads, args) || !saved) {
        return cudaErrorInvalidValue;
    }
    if (args.tokens == 0) return cudaSuccess;
    if (workspace_bytes < gated_delta_rule_backward_scratch_bytes(args.tokens, args.v_heads)) {
        return cudaErrorInvalidValue;
    }
    const Ws w = carve_parts(workspace, saved, args.tokens, args.v_heads, 2, nullptr);
    return backward_from(w, false, grads, dout, args, stream);
}

cudaError_t gated_delta_rule_backward(const GatedDeltaRuleGrads& grads, const __nv_bfloat16* dout,
                                      const GatedDeltaRuleArgs& args, void* workspace,
                                      size_t workspace_bytes, cudaStream_t stream) {
    if (!args_supported(args) || !grads_supported(grads, args)) return cudaErrorInvalidValue;
    if (args.tokens == 0) return cudaSuccess;
    if (workspace_bytes < gated_delta_rule_backward_workspace_bytes(args.tokens, args.v_heads)) {
        return cudaErrorInvalidValue;
    }
    const Ws w = carve(workspace, args.tokens, args.v_heads, true, nullptr);
    return backward_from(w, true, grads, dout, args, stream);
}

}  // namespace deltatune
