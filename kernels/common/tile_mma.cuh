// Tensor-core products of bf16 tiles in shared memory for the chunk kernels of the gated delta
// rule: mm_bf16 computes C = beta C + alpha op(A) op(B) in fp32 with every warp of the block (the
// operand flags say which operands are stored transposed); warp_tile_mma and for_each_pair serve
// kernels that keep a result in registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace deltatune::cuda {

// Four 8 x 8 bf16 blocks of shared memory in one instruction: lane l gives the address of row
// l % 8 of block l / 8 (16-byte aligned), and r[j] receives elements (g, 2t) and (g, 2t + 1) of
// block j (g = lane / 4, t = lane % 4).
__device__ __forceinline__ void load_blocks_x4(uint32_t (&r)[4], const void* row) {
    const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Operand flags of mm_bf16: kT, stored transposed.
enum : int { kN = 0, kT = 1 };

// How a product's M x N output is cut into warp tiles (see mm_bf16): kFm m16 blocks by kFn n8
// blocks per tile, kTiles tiles in row-major order, tile i to warp (i + kFirstWarp) % kWarpCount.
template <int M, int N, int kWarpCount, int kBigTileDiv, int kFirstWarp>
struct WarpTiles {
    static constexpr bool kBig =
        M % 32 == 0 && N % 32 == 0 && (M / 32) * (N / 32) * kBigTileDiv >= kWarpCount;
    static constexpr int kFm = kBig ? 2 : 1;
    static constexpr int kFn = kBig ? 4 : 2;
    static constexpr int kTn = N / (8 * kFn), kTiles = (M / (16 * kFm)) * kTn;
    __device__ static int first_tile() {
        return ((threadIdx.x >> 5) + kWarpCount - kFirstWarp) % kWarpCount;
    }
};

// C tile at (m0, n0) = beta C + alpha acc (fragment layout at mma_bf16), rounded to bf16 when C
// is bf16; a thread reads back only the C elements it writes.
template <int kFm, int kFn, int LDC, typename TC>
__device__ __forceinline__ void store_tile_acc(TC* C, const float (&acc)[kFm][kFn][4], int m0,
                                               int n0, float alpha, float beta) {
    constexpr bool kBf16C = std::is_same_v<TC, __nv_bfloat16>;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int fm = 0; fm < kFm; ++fm) {
#pragma unroll
        for (int fn = 0; fn < kFn; ++fn) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                TC* p = C + (m0 + fm * 16 + g + h * 8) * LDC + n0 + fn * 8 + 2 * t;
                float2 v = make_float2(alpha * acc[fm][fn][2 * h], alpha * acc[fm][fn][2 * h + 1]);
                if constexpr (kBf16C) {
                    auto* q = reinterpret_cast<__nv_bfloat162*>(p);
                    if (beta != 0.0f) {
                        const float2 o = __bfloat1622float2(*q);
                        v.x += beta * o.x;
                        v.y += beta * o.y;
                    }
                    *q = __floats2bfloat162_rn(v.x, v.y);
                } else {
                    auto* q = reinterpret_cast<float2*>(p);
                    if (beta != 0.0f) {
                        const float2 o = *q;
                        v.x += beta * o.x;
                        v.y += beta * o.y;
                    }
                    *q = v;
                }
            }
        }
    }
}

// m16n8k16 mma.sync with fp32 accumulation, every fragment fed by ldmatrix, transposed operands
// through its .trans form.
//
// d += a b on one m16n8k16 bf16 tile (PTX fragment layouts, g = lane / 4, t = lane % 4):
// a {(g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..)}, b {(2t..2t+1, g),
// (2t + 8.., g)}, d {(g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)}.
// Not volatile: it only reads and writes registers, and the compiler may then issue the next
// k step's fragment loads (volatile asm) before this product.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8 x 8 bf16 blocks, each transposed on the way: lane l gives row l % 8 of block l / 8, and
// r[j] receives elements (2t, g) and (2t + 1, g) of block j.
__device__ __forceinline__ void load_blocks_x4_trans(uint32_t (&r)[4], const void* row) {
    const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The m16 x k16 A fragment of op(A) at (m0, k0). Plain A: blocks at rows m0 + 0-7, m0 + 8-15 of
// columns k0 + 0-7, then of k0 + 8-15; A stored k x m: the same four blocks read transposed.
template <int OpA, int LDA>
__device__ __forceinline__ void load_a_fragment(uint32_t (&a)[4], const __nv_bfloat16* A, int m0,
                                                int k0) {
    const int lane = threadIdx.x & 31;
    if constexpr ((OpA & kT) != 0) {
        load_blocks_x4_trans(
            a, A + (k0 + (lane & 7) + (lane >> 4) * 8) * LDA + m0 + ((lane >> 3) & 1) * 8);
    } else {
        load_blocks_x4(a,
                       A + (m0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDA + k0 + (lane >> 4) * 8);
    }
}

// The k16 x n8 B fragments of op(B) at (k0, n0) and (k0, n0 + 8). B stored n x k: blocks at rows
// n0 + 0-7 of columns k0 + 0-7 and k0 + 8-15, then rows n0 + 8-15; plain B (k x n): the same
// blocks read transposed.
template <int OpB, int LDB>
__device__ __forceinline__ void load_b_fragments(uint32_t (&b0)[2], uint32_t (&b1)[2],
                                                 const __nv_bfloat16* B, int k0, int n0) {
    const int lane = threadIdx.x & 31;
    uint32_t r[4];
    if constexpr ((OpB & kT) != 0) {
        load_blocks_x4(r,
                       B + (n0 + (lane & 7) + (lane >> 4) * 8) * LDB + k0 + ((lane >> 3) & 1) * 8);
    } else {
        load_blocks_x4_trans(
            r, B + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDB + n0 + (lane >> 4) * 8);
    }
    b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

// acc += op(A) op(B) on one warp's kFm x kFn fragments at (m0, n0), over k in steps of 16.
template <int OpA, int OpB, int kFm, int kFn, int K, int LDA, int LDB>
__device__ __forceinline__ void warp_tile_mma(float (&acc)[kFm][kFn][4], const __nv_bfloat16* A,
                                              const __nv_bfloat16* B, int m0, int n0) {
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[kFm][4];
#pragma unroll
        for (int fm = 0; fm < kFm; ++fm) load_a_fragment<OpA, LDA>(a[fm], A, m0 + fm * 16, k0);
        uint32_t b[kFn][2];
#pragma unroll
        for (int fn = 0; fn < kFn; fn += 2) {
            load_b_fragments<OpB, LDB>(b[fn], b[fn + 1], B, k0, n0 + fn * 8);
        }
#pragma unroll
        for (int fm = 0; fm < kFm; ++fm) {
#pragma unroll
            for (int fn = 0; fn < kFn; ++fn) mma_bf16(acc[fm][fn], a[fm], b[fn]);
        }
    }
}

// The warp-tile loop of mm_bf16: each warp's output tiles (WarpTiles), accumulated over k, then
// stored.
template <int OpA, int OpB, int M, int N, int K, int LDA, int LDB, int LDC, int kWarpCount,
          int kBigTileDiv, int kFirstWarp, typename TC>
__device__ __forceinline__ void warp_tile_products(TC* C, const __nv_bfloat16* A,
                                                   const __nv_bfloat16* B, float alpha,
                                                   float beta) {
    using Tiles = WarpTiles<M, N, kWarpCount, kBigTileDiv, kFirstWarp>;
    constexpr int kFm = Tiles::kFm, kFn = Tiles::kFn;
    for (int tile = Tiles::first_tile(); tile < Tiles::kTiles; tile += kWarpCount) {
        const int m0 = (tile / Tiles::kTn) * 16 * kFm, n0 = (tile % Tiles::kTn) * 8 * kFn;
        float acc[kFm][kFn][4] = {};
        warp_tile_mma<OpA, OpB, kFm, kFn, K, LDA, LDB>(acc, A, B, m0, n0);
        store_tile_acc<kFm, kFn, LDC>(C, acc, m0, n0, alpha, beta);
    }
}

// A warp's 32 x 32 register tile (2 x 4 m16n8 fragments), for products whose result stays in
// registers across several products.
using WarpTile32 = float[2][4][4];

// The row of accumulator element i (0-3) of this lane's m16 fragment fm in a warp tile at row m0
// (layout at mma_bf16: elements 0, 1 in row g, 2, 3 in row g + 8).
__device__ __forceinline__ int fragment_row(int m0, int fm, int i) {
    return m0 + fm * 16 + ((threadIdx.x & 31) >> 2) + (i >> 1) * 8;
}

// A WarpTile32's elements by position: f(row, col, acc pair) for the two adjacent columns
// (col, col + 1) each thread holds per fragment row.
template <typename F>
__device__ __forceinline__ void for_each_pair(WarpTile32& acc, int m0, int n0, F&& f) {
    const int col = n0 + 2 * (threadIdx.x & 3);
#pragma unroll
    for (int fm = 0; fm < 2; ++fm) {
#pragma unroll
        for (int fn = 0; fn < 4; ++fn) {
#pragma unroll
            for (int i = 0; i < 4; i += 2) {
                f(fragment_row(m0, fm, i), col + fn * 8, acc[fm][fn][i], acc[fm][fn][i + 1]);
            }
        }
    }
}

// C (M x N, stride LDC; fp32, or bf16: rounded when stored) = beta C + alpha op(A) op(B), op(A):
// M x K, op(B): K x N, on bf16 operands. OpA: kT when A is stored K x M row-major (op(A) = A^T);
// OpB: kT when B is stored N x K. M, N and K multiples of 16. A and B are shared memory (16-byte
// aligned; LDA and LDB multiples of 8, and rows 16 bytes apart modulo 128, LD = 8 mod 64, read
// without bank conflicts); C may be global memory. Each warp owns whole output tiles (32 x 32 when
// there are enough for every warp, else 16 x 16) in a fixed order, and every thread reads back
// (beta != 0) only the C elements it wrote itself in an earlier call of the same shape. Callers
// put barriers around shared operands written by other threads.
//
// kWarpCount: the block's warps (8 unless the caller says otherwise).
//
// kBigTileDiv: 32 x 32 tiles already when there are kWarpCount / kBigTileDiv of them. A 32 x 32
// tile reads half the shared memory per product of a 16 x 16 one, which pays where shared-memory
// bandwidth, not idle warps, limits the kernel (measured per kernel; the tiling does not change
// any result: every element sums over k in the same order).
//
// kFirstWarp: the warp that takes the first tile, so that two products of one phase with fewer
// tiles than warps can run on different warps (a C read back needs the same value in each call).
template <int OpA, int OpB, int M, int N, int K, int LDA, int LDB, int LDC, int kWarpCount = 8,
          int kBigTileDiv = 1, int kFirstWarp = 0, typename TC = float>
__device__ __forceinline__ void mm_bf16(TC* C, const __nv_bfloat16* A, const __nv_bfloat16* B,
                                        float alpha, float beta) {
    static_assert(M % 16 == 0 && N % 16 == 0 && K % 16 == 0 && LDC % 2 == 0);
    static_assert(LDA % 8 == 0 && LDB % 8 == 0);
    warp_tile_products<OpA, OpB, M, N, K, LDA, LDB, LDC, kWarpCount, kBigTileDiv, kFirstWarp>(
        C, A, B, alpha, beta);
}

}  // namespace deltatune::cuda
