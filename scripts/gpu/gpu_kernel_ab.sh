#!/usr/bin/env bash
# Alternating A/B runs of one kernels_bench filter: a baseline build's kernels_bench (A_BIN, e.g.
# copied into the bundle as bin/kernels_bench_base) against the bundle's (B), ROUNDS times each,
# every output line kept and labelled, then Nsight Compute's per-kernel times of both (KERNELS, a
# regex of kernel names; see gpu_kernel_times.sh). Sustained kernels heat the GPU and lower its
# clocks, so only alternating rounds compare two builds fairly. On the GPU machine:
#   A_BIN=.device-build/bin/kernels_bench_base FILTER='[gdn_bench]' KERNELS=gdn_ \
#     bash scripts/gpu/gpu_kernel_ab.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
A_BIN=${A_BIN:?the baseline kernels_bench}
B_BIN=${B_BIN:-$B/bin/kernels_bench}
FILTER=${FILTER:-[gdn_bench]}
echo "A: $A_BIN (the baseline); B: $B_BIN"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in A B; do
    bin=$A_BIN; [[ $v == B ]] && bin=$B_BIN
    "$bin" "$FILTER" 2>&1 | keep_bench_lines | sed "s/^/$v$r | /"
  done
done
if [[ -n ${KERNELS:-} ]]; then
  for v in A B; do
    bin=$A_BIN; [[ $v == B ]] && bin=$B_BIN
    echo "== $v: per-kernel times (Nsight Compute, $FILTER)"
    KERNELS=$KERNELS bash "$(dirname "$0")/gpu_kernel_times.sh" "$bin" "$FILTER"
  done
fi
