// cuBLASLt GEMMs for the GPU model: bf16 (or FP8) operands, fp32 accumulation, bf16 or fp32 output,
// the algorithm chosen once per (shape, layout, alignment) and cached: cuBLASLt's first heuristic
// choice, or the fastest of its top candidates timed on a size bucket's first call.
// Row-major convention throughout (the PyTorch layout of activations and weights):
//   C (m, n) = alpha * op(A) op(B) + beta * C,  op(A): (m, k), op(B): (k, n),
// where A is stored (m, k) or, with trans_a, (k, m); lda/ldb/ldc are row strides in elements.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct cublasLtContext;

namespace deltatune {

enum class GemmOut : uint8_t { kBF16, kF32 };
// Operand formats. FP8 operands (kernels/tensor/fp8.h quantises them) come with dequantisation
// factors and only in the one layout Hopper's FP8 GEMMs take: C = A B^T with A (m, k) and
// B (n, k) both row-major (trans_a false, trans_b true), k and the leading dimensions multiples
// of 16.
enum class GemmIn : uint8_t { kBF16, kE4M3, kE5M2 };

struct GemmArgs {
    const void* a = nullptr;  // bf16
    bool trans_a = false;
    int64_t lda = 0;
    const void* b = nullptr;  // bf16
    bool trans_b = false;
    int64_t ldb = 0;
    void* c = nullptr;
    GemmOut c_type = GemmOut::kBF16;
    int64_t ldc = 0;
    int64_t m = 0, n = 0, k = 0;
    float alpha = 1.0f;
    float beta = 0.0f;  // 1 accumulates into C (weight gradients)
    GemmIn a_type = GemmIn::kBF16, b_type = GemmIn::kBF16;  // both bf16 or both FP8
    // FP8 only, device pointers: A's factor per row (m floats) and B's per row (n floats), C =
    // diag(a_scale) A B^T diag(b_scale) (cuBLASLt's outer-vector scaling); with
    // per_tensor_scale, one float each.
    const float* a_scale = nullptr;
    const float* b_scale = nullptr;
    bool per_tensor_scale = false;
    // FP8 only: accumulate in the tensor cores' own FP8 accumulator without periodic promotion
    // to fp32 (faster, less exact: off unless a caller measures it harmless).
    bool fast_accum = false;
};

class Gemm {
  public:
    // workspace: device scratch cuBLASLt may use (owned by the caller, outlives the Gemm).
    // time_candidates false: the heuristic's first choice, the same algorithm in every process
    // (timing may pick differently from run to run, and so round differently).
    static absl::StatusOr<std::unique_ptr<Gemm>> create(void* workspace, size_t workspace_bytes,
                                                        bool time_candidates);
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    // Enqueues C = alpha op(A) op(B) + beta C on `stream`. InvalidArgument when no algorithm
    // supports the shape. Empty problems (m, n or k = 0 with beta = 1) are no-ops.
    absl::Status run(const GemmArgs& args, cudaStream_t stream);
    size_t cached_algorithms() const { return cache_.size(); }
    // Size buckets whose candidates were timed (a timed choice serves every shape of its bucket:
    // sizes within 12.5%, as token counts vary between batches; a shape offered one candidate,
    // or met in a capture or with no memory for the scratch, is not timed), and how many of
    // those choices are not the heuristic's first.
    size_t timed_buckets() const { return timed_buckets_; }
    size_t retuned_algorithms() const { return retuned_; }

    // Host-side cost, for the bench: calls, cuBLASLt heuristic queries (one per new shape, so
    // per GEMM whose token count is new), and host time inside run(). On the 27B-slice the host
    // enqueues a step in under half its GPU time, so these stay off the critical path: the
    // heuristic's choice for a bucket's largest shape instead of the exact one cut the queries
    // from 25 to 7 per step but made the GEMMs 1.5% slower (docs/performance.md).
    struct HostStats {
        int64_t calls = 0;
        int64_t heuristic_queries = 0;
        int64_t host_ns = 0;
    };
    HostStats host_stats() const { return stats_; }

  private:
    struct Algo;
    // Enqueues x with a cached algorithm and its descriptors; counts the host time from t_start.
    absl::Status matmul(const GemmArgs& x, const Algo& algo, cudaStream_t stream,
                        std::chrono::steady_clock::time_point t_start);
    // m, n, k, transposes, leading dimensions, output type, accumulate, alignments, FP8 mode.
    using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, int,
                           bool, int, int>;
    Gemm() = default;
    cublasLtContext* handle_ = nullptr;
    bool time_candidates_ = false;
    size_t timed_buckets_ = 0;
    size_t retuned_ = 0;
    void* workspace_ = nullptr;
    size_t workspace_bytes_ = 0;
    std::map<Key, std::shared_ptr<Algo>> cache_;  // exact shape -> algorithm
    std::map<Key, std::shared_ptr<Algo>> timed_;  // size bucket -> timed choice
    HostStats stats_;
};

// The three GEMMs of a bias-free linear layer y = x W^T (W: (out, in), PyTorch layout):
//   forward:  y (rows, out) = x (rows, in) W^T                       (bf16 out)
//   dx:       dx (rows, in) = dy W  (+ dx when accumulate)           (bf16 out)
//   dW:       dW (out, in) += dy^T x                                 (fp32 out, accumulated)
absl::Status linear_forward(Gemm& g, void* y, const void* x, const void* w, int64_t rows,
                            int64_t in, int64_t out, cudaStream_t stream);
absl::Status linear_backward_dx(Gemm& g, void* dx, const void* dy, const void* w, int64_t rows,
                                int64_t in, int64_t out, bool accumulate, cudaStream_t stream);
// `accumulate` false: dW = dy^T x (the first write of a step's gradient).
absl::Status linear_backward_dw(Gemm& g, float* dw, const void* dy, const void* x, int64_t rows,
                                int64_t in, int64_t out, cudaStream_t stream,
                                bool accumulate = true);

}  // namespace deltatune
