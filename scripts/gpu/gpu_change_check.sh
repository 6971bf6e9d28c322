#!/usr/bin/env bash
# A kernel change's device check in one run (a lease's budget is short): every [cuda] test, the
# parity fixtures without recompute, then alternating rounds against a baseline build: the kernel
# benchmarks of FILTER (gpu_kernel_ab.sh) and the training step (gpu_step_ab.sh). The baselines
# sit in the bundle, stripped, plain or .xz: bin/kernels_bench_base and daemon/deltatune_base (from
# scripts/gpu/build_baseline.sh COMMIT); a missing one skips its rounds. On the GPU machine, over the
# bundle folder or a carried .carry/bundle.tar.xz of it:
#   FILTER='[gdn_bench]' ROUNDS=3 STEP_ROUNDS=2 bash scripts/gpu/gpu_change_check.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
unpack_bundle "$B"
export BUNDLE_DIR=$B
echo "== [cuda] tests"
TEST_FILTER='[cuda]' bash scripts/gpu/gpu_run.sh
echo "== parity"
RECOMPUTE=none bash scripts/gpu/gpu_parity.sh
if [[ -x $B/bin/kernels_bench_base ]]; then
  echo "== kernels: A the baseline, B this bundle"
  A_BIN=$B/bin/kernels_bench_base FILTER=${FILTER:-[gdn_bench]} ROUNDS=${ROUNDS:-3} \
    bash scripts/gpu/gpu_kernel_ab.sh
fi
if [[ -x $B/daemon/deltatune_base ]]; then
  echo "== step: A this bundle, B the baseline"
  B_BIN=$B/daemon/deltatune_base ROUNDS=${STEP_ROUNDS:-2} bash scripts/gpu/gpu_step_ab.sh
fi
