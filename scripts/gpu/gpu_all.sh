#!/usr/bin/env bash
# One device run for everything GPU (see gpu_bundle.sh; carry the bundle folder): every [cuda]
# test, `deltatune kernels`, and `deltatune step --device cuda` on the parity fixtures against
# transformers' fp32 gradients (gpu_parity.sh: tiny-c's FAIL there is its documented floor).
#   BUNDLE_DIR=.device-build bash scripts/gpu/gpu_all.sh
# and, when the bundle holds it (BUNDLE_TESTS="... kernels_bench"), every kernel benchmark.
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
TEST_FILTER='[cuda]' bash scripts/gpu/gpu_run.sh
echo "== deltatune kernels (27B-slice config)"
"$B/daemon/deltatune" kernels --config configs/models/qwen3.8-27b-slice.json
echo "== deltatune kernels --strict (tiny-a)"
"$B/daemon/deltatune" kernels --config configs/models/tiny-a.json --strict >/dev/null; echo "exit $?"
echo "== step --device cuda vs transformers fp32"
BUNDLE_DIR=$B bash scripts/gpu/gpu_parity.sh
# The per-kernel benchmarks, when bundled (BUNDLE_TESTS=... kernels_bench; tests/bench).
if [[ -x "$B/bin/kernels_bench" ]]; then
  echo "== kernels_bench (copy / GEMM ceilings measured in the run)"
  "$B/bin/kernels_bench" | grep -vE "^$|^[=-]+$|^Filters|^Randomness|is a Catch"
fi
