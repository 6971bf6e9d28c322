// The cases of tile_mma_cuda_test.cc: mm_bf16 (kernels/common/tile_mma.cuh) run by one 8-warp
// block on bf16 operands copied into shared memory as stored (strides included), C (fp32) read
// back whole.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

namespace deltatune::cudatest {

struct TileMmaCase {
    const char* name;
    int op_a, op_b;     // the mm_bf16 operand flags (kT = 1)
    int m, n, k;        // op(A) m x k, op(B) k x n
    int lda, ldb, ldc;  // strides as stored: A k x m (lda) when transposed, else m x k
    int big_tile_div;   // mm_bf16's kBigTileDiv
};

inline constexpr TileMmaCase kTileMmaCases[] = {
    {"A m x k, B n x k, 16 x 16 warp tiles", 0, 1, 64, 64, 128, 136, 136, 68, 1},
    {"A m x k, B n x k, 32 x 32 warp tiles", 0, 1, 64, 64, 128, 136, 136, 68, 2},
    {"A k x m, B k x n", 1, 0, 64, 128, 64, 72, 136, 136, 1},
    {"A m x k, B k x n", 0, 0, 64, 128, 64, 72, 136, 132, 4},
    {"A k x m, B n x k", 1, 1, 128, 64, 64, 136, 72, 72, 4},
    {"one 16 x 16 tile, seven warps idle", 0, 0, 16, 16, 16, 24, 24, 20, 1},
};
inline constexpr int kTileMmaCaseCount = sizeof(kTileMmaCases) / sizeof(kTileMmaCases[0]);

// Elements of A, B and C as stored (rows times stride).
constexpr int stored_a(const TileMmaCase& x) {
    return ((x.op_a & 1) ? x.k : x.m) * x.lda;
}
constexpr int stored_b(const TileMmaCase& x) {
    return ((x.op_b & 1) ? x.n : x.k) * x.ldb;
}
constexpr int stored_c(const TileMmaCase& x) {
    return x.m * x.ldc;
}

// Runs case `index` on device arrays holding A and B as stored (bf16 bits) and C (fp32, read for
// beta and written back, padding included); synchronous.
cudaError_t run_tile_mma_case(int index, const void* a, const void* b, float* c, float alpha,
                              float beta);

}  // namespace deltatune::cudatest
#endif
