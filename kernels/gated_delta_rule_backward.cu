// The gated delta rule's backward (see gated_delta_rule.cu for the math): the replayed forward,
// the reverse recurrence, per-chunk state gradients, and the chunk_prep backward through T, the
// masks, the gates and the L2 norm.
#include "kernels/gated_delta_rule_common.cuh"

namespace deltatune {
namespace {

// Reverse recurrence: dVn = Aqk^T dO + Kd dS;  dS <- gam dS + Qd^T dO - W^T dVn, where dS is the
// gradient of the state leaving the chunk (saved as dh before the update). Operands of the next
// (earlier) chunk are copied in while this one computes, as in the forward.
template <int kBV>
__global__ void __launch_bounds__(rec_threads<kBV>())
    gdn_recurrence_backward_kernel(Ws ws, const __nv_bfloat16* dout, int32_t tokens, int v_heads) {
    constexpr int kLdV = rec_ld<kBV>();
    extern __shared__ __align__(128) float smem[];
    RecurrenceSmem<kBV>& sm = *reinterpret_cast<RecurrenceSmem<kBV>*>(smem);
    float* sdS = sm.S;
    float* sW = sm.W;
    float* sQd = sm.Qd;
    float* sKd = sm.Kd;
    float* sAqk = sm.Aqk;
    float* sdO = sm.V;
    float* sdVn = sm.O;
    const int h = blockIdx.x;
    const int v0 = blockIdx.y * kBV;
    for (int n = threadIdx.x; n < kD * kLdV; n += blockDim.x) sdS[n] = 0.0f;
    __syncthreads();  // the first chunk reads the zeros with another thread mapping
    const int chunks = static_cast<int>(num_chunks(tokens));
    auto tile_of = [&](int c) { return static_cast<int64_t>(c) * v_heads + h; };
    auto dout_of = [&](int c) {
        return dout + (static_cast<int64_t>(c) * kC * v_heads + h) * kD + v0;
    };
    {
        const int64_t tile = tile_of(chunks - 1);
        copy_tile(sAqk, kLdCT, ws.Aqk + tile * kSquare, kC, kC, kC);
        copy_tile(sKd, kLdK, ws.Kd + tile * kTile, kD, kC, kD);
        copy_tile(sQd, kLdKT, ws.Qd + tile * kTile, kD, kC, kD);
        copy_tile(sW, kLdKT, ws.W + tile * kTile, kD, kC, kD);
        load_bf16_rows<kBV, kLdV, rec_threads<kBV>()>(
            sdO, dout_of(chunks - 1), int64_t{v_heads} * kD, tokens - (chunks - 1) * kC);
    }
    for (int c = chunks - 1; c >= 0; --c) {
        const int64_t tile = tile_of(c);
        const bool more = c > 0;
        const int64_t next = tile_of(c - 1);
        for (int n = threadIdx.x; n < kD * kBV / 4; n += blockDim.x) {
            const int r = n / (kBV / 4), col = (n % (kBV / 4)) * 4;
            *reinterpret_cast<float4*>(ws.dh + tile * kState + r * kD + v0 + col) =
                *reinterpret_cast<const float4*>(sdS + r * kLdV + col);
        }
        const float gam = ws.gam[tile];
        copies_wait();
        __syncthreads();
        mm<kT | kTf32, kTf32, kC, kBV, kC, kLdCT, kLdV, kLdV, rec_threads<kBV>() / 32, kRecTileDiv>(
            sdVn, sAqk, sdO, 1.0f, 0.0f);
        mm<kTf32, kN, kC, kBV, kD, kLdK, kLdV, kLdV, rec_threads<kBV>() / 32, kRecTileDiv>(
            sdVn, sKd, sdS, 1.0f, 1.0f);
        __syncthreads();
        if (more) {
            copy_tile(sAqk, kLdCT, ws.Aqk + next * kSquare, kC, kC, kC);
            copy_tile(sKd, kLdK, ws.Kd + next * kTile, kD, kC, kD);
        }
        mm<kT | kTf32, kTf32, kD, kBV, kC, kLdKT, kLdV, kLdV, rec_threads<kBV>() / 32, kRecTileDiv>(
            sdS, sQd, sdO, 1.0f, gam);
        mm<kT | kTf32, kN, kD, kBV, kC, kLdKT, kLdV, kLdV, rec_threads<kBV>() / 32, kRecTileDiv>(
            sdS, sW, sdVn, -1.0f, 1.0f);
        for (int n = threadIdx.x; n < kC * kBV / 4; n += blockDim.x) {
            const int r = n / (kBV / 4), col = (n % (kBV / 4)) * 4;
            *reinterpret_cast<float4*>(ws.dVn + tile * kTile + r * kD + v0 + col) =
                *reinterpret_cast<const float4*>(sdVn + r * kLdV + col);
        }
        __syncthreads();
        if (more) {
            copy_tile(sQd, kLdKT, ws.Qd + next * kTile, kD, kC, kD);
            copy_tile(sW, kLdKT, ws.W + next * kTile, kD, kC, kD);
            load_bf16_rows<kBV, kLdV, rec_threads<kBV>()>(sdO, dout_of(c - 1),
                                                          int64_t{v_heads} * kD, kC);
        }
    }
}

template <int kBV>
cudaError_t launch_recurrence_backward(const Ws& w, const __nv_bfloat16* dout, int32_t tokens,
                                       int v_heads, cudaStream_t stream) {
    auto* kernel = gdn_recurrence_backward_kernel<kBV>;
    if (cudaError_t e = set_smem(kernel, rec_smem<kBV>()); e != cudaSuccess) return e;
    kernel<<<dim3(static_cast<unsigned>(v_heads), kD / kBV), rec_threads<kBV>(), rec_smem<kBV>(),
             stream>>>(w, dout, tokens, v_heads);
    return cudaGetLastError();
}

struct StateGradSmem {
    float dO[kSTile];    // kC x kD, stride kLdK
    float V[kSTile];     // dVn, then Vn
    float S[kD * kLdK];  // the entering state, then the leaving-state gradient
    float scratch[32];
};
constexpr size_t kStateGradSmem = sizeof(StateGradSmem);

// Per chunk and value head, from the entering state S and the leaving-state gradient dS:
// dQd = dO S^T, dW = -dVn S^T, dKd = Vn dS^T, dAqk = dO Vn^T, dgam = <S, dS>.
__global__ void __launch_bounds__(kThreads)
    gdn_state_grads_kernel(Ws ws, const __nv_bfloat16* dout, int32_t tokens, int v_heads) {
    extern __shared__ __align__(128) float smem[];
    StateGradSmem& sm = *reinterpret_cast<StateGradSmem*>(smem);
    float* sdO = sm.dO;
    float* sV = sm.V;
    float* sS = sm.S;
    float* scratch = sm.scratch;
    const int c = blockIdx.x, h = blockIdx.y;
    const int32_t c0 = c * kC;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    copy_tile(sV, kLdK, ws.dVn + tile * kTile, kD, kC, kD);
    copy_tile(sS, kLdK, ws.h + tile * kState, kD, kD, kD);
    load_bf16_rows<kD, kLdK>(sdO, dout + (static_cast<int64_t>(c0) * v_heads + h) * kD,
                             int64_t{v_heads} * kD, tokens - c0);
    copies_wait();
    __syncthreads();
    mm<kTf32, kT, kC, kD, kD, kLdK, kLdK, kD, kThreads / 32>(ws.dQd + tile * kTile, sdO, sS, 1.0f,
                                                             0.0f);
    mm<kN, kT, kC, kD, kD, kLdK, kLdK, kD, kThreads / 32>(ws.dW + tile * kTile, sV, sS, -1.0f,
                                                          0.0f);
    __syncthreads();
    copy_tile(sV, kLdK, ws.Vn + tile * kTile, kD, kC, kD);
    // dgam = <S, dS>, then dS replaces S; 16 loads in flight per thread.
    constexpr int kPer = kState / 4 / kThreads;
    const float4* dh4 = reinterpret_cast<const float4*>(ws.dh + tile * kState);
    float4 d[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) d[j] = dh4[threadIdx.x + j * kThreads];
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int i = threadIdx.x + j * kThreads;
        float4* p = reinterpret_cast<float4*>(sS + (i / (kD / 4)) * kLdK + (i % (kD / 4)) * 4);
        const float4 s = *p;
        dot += s.x * d[j].x + s.y * d[j].y + s.z * d[j].z + s.w * d[j].w;
        *p = d[j];
    }
    dot = cuda::block_sum(dot, scratch);
    copies_wait();
    __syncthreads();
    mm<kN, kT, kC, kD, kD, kLdK, kLdK, kD, kThreads / 32>(ws.dKd + tile * kTile, sV, sS, 1.0f,
                                                          0.0f);
    mm<kTf32, kT, kC, kC, kD, kLdK, kLdK, kC, kThreads / 32>(ws.dAqk + tile * kSquare, sdO, sV,
                                                             1.0f, 0.0f);
    if (threadIdx.x == 0) ws.dgam[tile] = dot;
}

// chunk_prep_backward runs 16 warps: its shared memory (PrepBwdSmem, whose size is the launch's)
// allows one block per multiprocessor, and twice the warps hide more of its many short,
// barrier-separated phases.
constexpr int kPrepBwdThreads = 512;
constexpr int kPrepBwdWarps = kPrepBwdThreads / 32;
constexpr int kPrepBwdTileDiv = 2;
struct PrepBwdSmem {
    float K[kSTile];    // kC x kD, stride kLdK
    float acc[kSTile];  // dKn, written to global at the end
    float s1[kSTile];
    float s2[kSTile];     // Qn first
    float T[kC * kLdCT];  // kC x kC, stride kLdCT: three of its four products read it as k x n
    float X[kSSquare];
    float Y[kSSquare];  // Y and Z together also hold one kC x kD tile
    float Z[kSSquare];
    float dbeta[kC];
    float dG[kC];
    float red[4];  // two warps' partial sums
    ChunkMeta meta;
};
constexpr size_t kPrepBwdSmem = sizeof(PrepBwdSmem);
static_assert(2 * kSSquare >= kSTile);

// acc[i] += sum_j X[i,j] - (with_cols ? sum_j X[j,i] : 0) for a kC x kC matrix of stride kLdC.
// One warp per row, fixed order.
__device__ void add_row_col_sums(float* acc, const float* X, bool with_cols) {
    __syncthreads();
    const int lane = threadIdx.x & 31;
    for (int i = threadIdx.x >> 5; i < kC; i += blockDim.x >> 5) {
        float s = X[i * kLdC + lane] + X[i * kLdC + lane + 32];
        if (with_cols) s -= X[lane * kLdC + i] + X[(lane + 32) * kLdC + i];
        s = cuda::warp_sum(s);
        if (lane == 0) acc[i] += s;
    }
    __syncthreads();
}

// out[r] = sum_c X[r,c] Y[r,c] over two kC x kD matrices of stride kLdK (one warp per row).
__device__ void row_dots(float* out, const float* X, const float* Y) {
    const int lane = threadIdx.x & 31;
    for (int r = threadIdx.x >> 5; r < kC; r += blockDim.x >> 5) {
        float s = 0.0f;
        for (int col = lane; col < kD; col += 32) s += X[r * kLdK + col] * Y[r * kLdK + col];
        s = cuda::warp_sum(s);
        if (lane == 0) out[r] = s;
    }
}

__global__ void __launch_bounds__(kPrepBwdThreads)
    gdn_chunk_prep_backward_kernel(Ws ws, __nv_bfloat16* dv, __nv_bfloat16* da, __nv_bfloat16* db,
                                   int64_t ld_dv, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                   const __nv_bfloat16* v, int64_t ldqk, int64_t ldv,
                                   const __nv_bfloat16* a, const __nv_bfloat16* b,
                                   const float* A_log, const float* dt_bias, const int32_t* cu,
                                   int64_t num_docs, int32_t tokens, int k_heads, int v_heads,
                                   float scale) {
    extern __shared__ __align__(128) float smem[];
    PrepBwdSmem& sm = *reinterpret_cast<PrepBwdSmem*>(smem);
    float* sK = sm.K;
    float* sAcc = sm.acc;
    float* s1 = sm.s1;
    float* s2 = sm.s2;
    float* sT = sm.T;
    float* sX = sm.X;
    float* sY = sm.Y;
    float* sZ = sm.Z;
    float* sYZ = sm.Y;  // Y and Z as one kC x kD tile (stride kLdK)
    float* dbeta = sm.dbeta;
    float* dG = sm.dG;
    ChunkMeta& m = sm.meta;
    const int c = blockIdx.x, h = blockIdx.y;
    const int32_t c0 = c * kC;
    const int64_t tile = static_cast<int64_t>(c) * v_heads + h;
    copy_tile(s1, kLdK, ws.dQd + tile * kTile, kD, kC, kD);
    copy_tile(sT, kLdCT, ws.T + tile * kSquare, kC, kC, kC);
    copy_tile(sZ, kLdC, ws.dAqk + tile * kSquare, kC, kC, kC);
    load_chunk<kPrepBwdWarps>(m, s2, sK, q, k, ldqk, a, b, A_log, dt_bias, cu, num_docs, tokens,
                              k_heads, v_heads, h, c);
    if (threadIdx.x < kC) {
        dbeta[threadIdx.x] = 0.0f;
        dG[threadIdx.x] = 0.0f;
    }
    // Aqk = scale lower_same(Qn Kn^T * E): Z = scale dAqk * E on the mask, H = dAqk * Aqk.
    mm<kN, kT, kC, kC, kD, kLdK, kLdK, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sX, s2, sK, 1.0f,
                                                                             0.0f);
    copies_wait();
    __syncthreads();
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        const int i = r * kLdC + s;
        if (pair_on(m, r, s, false)) {
            const float z = sZ[i] * scale * expf(m.gam[r] - m.gam[s]);
            sY[i] = z;
            sX[i] = z * sX[i];
        } else {
            sY[i] = 0.0f;
            sX[i] = 0.0f;
        }
    }
    // Qd = scale diag(exp(Gamma) f) Qn: dQn = scale exp(Gamma) f dQd + Z Kn, with the Gamma part
    // from rowsum(dQd * Qn).
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, i = r * kLdK + n % kD;
        s1[i] = m.f[r] != 0.0f ? s1[i] : 0.0f;
    }
    __syncthreads();
    row_dots(dbeta + 0, s1, s2);  // borrowed as scratch: rowsum(dQd * Qn) on f rows
    __syncthreads();
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, i = r * kLdK + n % kD;
        s1[i] *= scale * m.eg[r];
    }
    add_row_col_sums(dG, sX, true);
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        dG[r] += scale * m.eg[r] * dbeta[r];
        dbeta[r] = 0.0f;
    }
    // dQn += Z Kn, dKn = Z^T Qn.
    mm<kN, kN, kC, kD, kC, kLdC, kLdK, kLdK, kPrepBwdWarps, kPrepBwdTileDiv>(s1, sY, sK, 1.0f,
                                                                             1.0f);
    mm<kT, kN, kC, kD, kC, kLdC, kLdK, kLdK, kPrepBwdWarps, kPrepBwdTileDiv>(sAcc, sY, s2, 1.0f,
                                                                             0.0f);
    __syncthreads();
    // Kd = diag(exp(Gamma_L - Gamma) l) Kn. dKd, then dVn (the U part's), are copied in while dQn
    // is stored: two commit groups, the first waited for here.
    copy_tile(s2, kLdK, ws.dKd + tile * kTile, kD, kC, kD);
    cuda::cp_async_commit();
    store_tile(ws.dQn + tile * kTile, s1);
    __syncthreads();
    copy_tile(s1, kLdK, ws.dVn + tile * kTile, kD, kC, kD);
    cuda::cp_async_commit();
    cuda::cp_async_wait<1>();
    __syncthreads();
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, i = r * kLdK + n % kD;
        s2[i] = m.l[r] != 0.0f ? s2[i] : 0.0f;
        sAcc[i] += m.el[r] * s2[i];
    }
    __syncthreads();
    row_dots(dbeta, s2, sK);  // scratch again: rowsum(dKd * Kn) on l rows
    __syncthreads();
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        const float e = m.el[r] * dbeta[r];
        dG[r] -= e;
        const float sum_e = cuda::warp_sum(e);
        if ((r & 31) == 0) sm.red[r >> 5] = sum_e;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        dG[m.last] += (sm.red[0] + sm.red[1]) + ws.dgam[tile] * m.f[m.last] * expf(m.gam[m.last]);
    }
    __syncthreads();
    if (threadIdx.x < kC) dbeta[threadIdx.x] = 0.0f;
    // U = T diag(beta) V: X = dU V^T, dBv = T^T dU, dV = beta dBv.
    load_bf16_rows<kD, kLdK, kPrepBwdThreads>(s2, v + static_cast<int64_t>(c0) * ldv + h * kD, ldv,
                                              tokens - c0);
    copies_wait();
    __syncthreads();
    mm<kN, kT | kTf32, kC, kC, kD, kLdK, kLdK, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sX, s1, s2,
                                                                                     1.0f, 0.0f);
    mm<kT | kTf32, kN, kC, kD, kC, kLdCT, kLdK, kLdK, kPrepBwdWarps, kPrepBwdTileDiv>(sYZ, sT, s1,
                                                                                      1.0f, 0.0f);
    __syncthreads();
    copy_tile(s1, kLdK, ws.dW + tile * kTile, kD, kC, kD);  // in flight while dV is written
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, col = n % kD;
        const int32_t t = c0 + r;
        if (t < tokens) {
            dv[static_cast<int64_t>(t) * ld_dv + h * kD + col] =
                __float2bfloat16_rn(m.beta[r] * sYZ[r * kLdK + col]);
        }
    }
    row_dots(dbeta, sYZ, s2);  // dbeta += rowsum(dBv * V) (dbeta was zeroed above)
    __syncthreads();
    // W = T diag(beta exp(Gamma) f) Kn: Y = dW Kn^T, dBk = T^T dW.
    copies_wait();
    __syncthreads();
    mm<kN, kT, kC, kC, kD, kLdK, kLdK, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sY, s1, sK, 1.0f,
                                                                             0.0f);
    mm<kT | kTf32, kN, kC, kD, kC, kLdCT, kLdK, kLdK, kPrepBwdWarps, kPrepBwdTileDiv>(s2, sT, s1,
                                                                                      1.0f, 0.0f);
    __syncthreads();
    for (int n = threadIdx.x; n < kTile; n += blockDim.x) {
        const int r = n / kD, i = r * kLdK + n % kD;
        if (m.f[r] != 0.0f) sAcc[i] += m.beta[r] * m.eg[r] * s2[i];
    }
    row_dots(sZ, s2, sK);
    __syncthreads();
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        const float w = m.f[r] != 0.0f ? m.eg[r] * sZ[r] : 0.0f;
        dbeta[r] += w;
        dG[r] += w * m.beta[r];
    }
    // dT = X diag(beta) + Y diag(beta exp(Gamma) f);  dA = -T^T dT T^T.
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int s = n % kC, i = (n / kC) * kLdC + s;
        sX[i] = m.beta[s] * (sX[i] + (m.f[s] != 0.0f ? sY[i] * m.eg[s] : 0.0f));
    }
    __syncthreads();
    mm<kT | kTf32, kN, kC, kC, kC, kLdCT, kLdC, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sZ, sT, sX,
                                                                                      1.0f, 0.0f);
    __syncthreads();
    mm<kN, kT | kTf32, kC, kC, kC, kLdC, kLdCT, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sY, sZ, sT,
                                                                                      -1.0f, 0.0f);
    mm<kN, kT, kC, kC, kD, kLdK, kLdK, kLdC, kPrepBwdWarps, kPrepBwdTileDiv>(sX, sK, sK, 1.0f,
                                                                             0.0f);  // Kn Kn^T
    __syncthreads();
    // A = strict_lower_same(diag(beta) Kn Kn^T * E): P = diag(beta) dA * E, H = dA * A.
    for (int n = threadIdx.x; n < kSquare; n += blockDim.x) {
        const int r = n / kC, s = n % kC;
        const int i = r * kLdC + s;
        if (pair_on(m, r, s, true)) {
            const float de = sY[i] * expf(m.gam[r] - m.gam[s]);
            sZ[i] = de * sX[i];              // d A / d beta_r part
            sY[i] = m.beta[r] * de;          // P
            sX[i] = m.beta[r] * de * sX[i];  // H
        } else {
            sZ[i] = sY[i] = sX[i] = 0.0f;
        }
    }
    add_row_col_sums(dG, sX, true);
    add_row_col_sums(dbeta, sZ, false);
    mm<kN, kN, kC, kD, kC, kLdC, kLdK, kLdK, kPrepBwdWarps, kPrepBwdTileDiv>(sAcc, sY, sK, 1.0f,
                                                                             1.0f);
    mm<kT, kN, kC, kD, kC, kLdC, kLdK, kLdK, kPrepBwdWarps, kPrepBwdTileDiv>(sAcc, sY, sK, 1.0f,
                                                                             1.0f);
    __syncthreads();
    store_tile(ws.dKn + tile * kTile, sAcc);
    // Gates: dg = reverse cumsum of dGamma; beta = sigmoid(b); g = -exp(A_log) softplus(a + dt).
    // Suffix sums of dG: a shuffle scan in each of the two warps, then the upper warp's total.
    if (threadIdx.x < kC) {
        const int r = threadIdx.x, lane = r & 31;
        float suffix = dG[r];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float u = __shfl_down_sync(0xffffffffu, suffix, o);
            if (lane + o < 32) suffix += u;
        }
        if (r == 32) sm.red[2] = suffix;
        sX[2 * kC + r] = suffix;  // sX is free again
    }
    __syncthreads();
    if (threadIdx.x < kC) {
        const int r = threadIdx.x;
        const float run = sX[2 * kC + r] + (r < 32 ? sm.red[2] : 0.0f);
        const int32_t t = c0 + r;
        float d_a = 0.0f, d_A = 0.0f;
        if (t < tokens) {
            const int64_t n = static_cast<int64_t>(t) * v_heads + h;
            const float dsp = m.ax[r] > kSoftplusThreshold ? 1.0f : sigmoidf(m.ax[r]);
            d_a = run * (-expf(A_log[h])) * dsp;
            da[n] = __float2bfloat16_rn(d_a);
            db[n] = __float2bfloat16_rn(dbeta[r] * m.beta[r] * (1.0f - m.beta[r]));
            d_A = run * m.g[r];
        }
        sX[r] = d_a;  // sX is free again
        sX[kC + r] = d_A;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int r = threadIdx.x;
        const float sum_da = cuda::warp_sum(sX[r] + sX[r + 32]);
        const float sum_dA = cuda::warp_sum(sX[kC + r] + sX[kC + r + 32]);
        if (r == 0) {
            ws.pdt[tile] = sum_da;
            ws.pA[tile] = sum_dA;
        }
    }
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
    return stride_ok(g.dqkv_stride, std::max(x.k_heads, x.v_heads) * kD);
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
    if (cudaError_t e = recurrence_columns(vh) == 64
                            ? launch_recurrence_backward<64>(w, dout, t32, vh, stream)
                            : launch_recurrence_backward<32>(w, dout, t32, vh, stream);
        e != cudaSuccess) {
        return e;
    }
    if (cudaError_t e = set_smem(gdn_state_grads_kernel, kStateGradSmem); e != cudaSuccess) {
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
