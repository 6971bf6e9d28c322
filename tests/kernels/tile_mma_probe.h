// The cases of tile_mma_cuda_test.cc: mm or mm_bf16 (kernels/common/tile_mma.cuh) run by
// one 8-warp block on operands copied into shared memory as stored (strides included), C read back
// whole.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>

namespace deltatune::cudatest {

// Operand types of a case: fp32 (mm), bf16 (mm_bf16).
enum TileMmaOperands : int { kFp32Operands = 0, kBf16Operands = 1 };

struct TileMmaCase {
    const char* name;
    int op_a, op_b;     // the mm operand flags (kT = 1, kTf32 = 2)
    int m, n, k;        // op(A) m x k, op(B) k x n
    int lda, ldb, ldc;  // strides as stored: A k x m (lda) when transposed, else m x k
    int big_tile_div;   // mm's kBigTileDiv
    bool round_c;       // mm's kRoundC
    int operands;       // TileMmaOperands: which of A and B hold bf16 bits
};

inline constexpr TileMmaCase kTileMmaCases[] = {
    {"A m x k, B n x k, 16 x 16 warp tiles", 0, 1, 64, 64, 128, 132, 132, 68, 1, false,
     kFp32Operands},
    {"A m x k, B n x k, 32 x 32 warp tiles", 0, 1, 64, 64, 128, 132, 132, 68, 2, false,
     kFp32Operands},
    {"A m x k, B k x n, C rounded to tf32", 0, 0, 64, 128, 64, 68, 132, 132, 4, true,
     kFp32Operands},
    {"A k x m, B k x n", 1, 0, 64, 128, 64, 72, 136, 136, 1, false, kFp32Operands},
    {"A k x m tf32, B k x n tf32", 3, 2, 128, 64, 64, 136, 72, 72, 4, false, kFp32Operands},
    {"A m x k tf32, B n x k tf32", 2, 3, 64, 64, 128, 132, 132, 68, 2, false, kFp32Operands},
    {"one 16 x 16 tile, seven warps idle", 0, 0, 16, 16, 8, 12, 20, 20, 1, false, kFp32Operands},
    {"bf16: A m x k, B n x k", 0, 1, 64, 64, 128, 136, 136, 68, 2, false, kBf16Operands},
    {"bf16: A k x m, B k x n", 1, 0, 64, 128, 64, 72, 136, 136, 1, false, kBf16Operands},
    {"bf16: A m x k, B k x n", 0, 0, 64, 128, 64, 72, 136, 132, 4, false, kBf16Operands},
    {"bf16: A k x m, B n x k", 1, 1, 128, 64, 64, 136, 72, 72, 4, false, kBf16Operands},
    {"bf16: one 16 x 16 tile", 0, 0, 16, 16, 16, 24, 24, 20, 1, false, kBf16Operands},
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

// Runs case `index` on device arrays holding A and B as stored (fp32, or bf16 bits for bf16
// cases) and C (read for beta and written back, padding included); synchronous.
cudaError_t run_tile_mma_case(int index, const void* a, const void* b, float* c, float alpha,
                              float beta);

}  // namespace deltatune::cudatest
#endif
