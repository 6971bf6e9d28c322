#!/usr/bin/env bash
# FP8 projections' evidence in one device call (issue 56 item 2), over the bundle of gpu_bundle.sh
# with kernels_bench (BUNDLE_TESTS="kernels_tests runtime_tests kernels_bench"):
#  1. the FP8 [cuda] tests: quantisation bit for bit against the reference, the FP8 GEMM in the
#     three linear forms against fp64, the model's FP8 step against its bf16 step (loss, every
#     gradient's cosine, printed);
#  2. kernels_bench "[fp8_gemm_bench]": bf16 against FP8 GEMMs per 27B projection, and what the
#     standalone quantisation passes cost;
#  3. the 27B-slice step (LAYERS, default 4: fits an 80 GB card), bf16 and FP8 projections in
#     turns, ROUNDS (default 2) each, with the step by part (gpu_step_ab.sh).
#   bash scripts/gpu/gpu_fp8.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
unpack_bundle "$B"
bundle_env "$B"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
echo "== FP8 [cuda] tests"
"$B/bin/kernels_tests" "fp8*,quantize_*" 2>&1 | grep -E "passed|failed|FAILED|with expansion" | tail -6
"$B/bin/runtime_tests" "cuBLASLt FP8*" 2>&1 | grep -E "passed|failed|FAILED|error" | tail -4
"$B/bin/runtime_tests" "FP8 projections: loss*" -s 2>&1 | grep -E "^FP8 projections|passed|failed" | tail -6
if [[ -x $B/bin/kernels_bench ]]; then
  echo "== FP8 against bf16 GEMMs, 27B projections at 8192 tokens"
  timeout 300 "$B/bin/kernels_bench" "[fp8_gemm_bench]" 2>&1 | keep_bench_lines
fi
echo "== 27B-slice (${LAYERS:-4} layers) step: bf16 and FP8 projections in turns"
FLAG_VARIANTS="--projections bf16;--projections fp8" BUNDLE_DIR=$B \
  BENCH_ARGS="--layers ${LAYERS:-4} ${BENCH_ARGS:-}" ROUNDS=${ROUNDS:-2} bash scripts/gpu/gpu_step_ab.sh
