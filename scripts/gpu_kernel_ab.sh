#!/usr/bin/env bash
# Alternating A/B runs of one kernels_bench filter: a baseline build's kernels_bench (A_BIN, e.g.
# copied into the bundle as bin/kernels_bench_base) against the bundle's (B), ROUNDS times each,
# every output line kept and labelled, then Nsight Compute's per-kernel times of both (KERNELS, a
# regex of kernel names; see gpu_kernel_times.sh). Sustained kernels heat the GPU and lower its
# clocks, so only alternating rounds compare two builds fairly. On the GPU machine:
#   A_BIN=.device-build/bin/kernels_bench_base FILTER='[gdn_bench]' KERNELS=gdn_ \
#     bash scripts/gpu_kernel_ab.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
S=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=$PWD/$B/lib:/usr/local/cuda/lib64:$S/nccl/lib:$S/cudnn/lib:${LD_LIBRARY_PATH:-}
A_BIN=${A_BIN:?the baseline kernels_bench}
B_BIN=${B_BIN:-$B/bin/kernels_bench}
FILTER=${FILTER:-[gdn_bench]}
echo "A: $A_BIN (the baseline); B: $B_BIN"
keep() { grep -vE "^$|^[=-]+$|^Filters|^Randomness|is a Catch|^All tests|^test cases"; }
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in A B; do
    bin=$A_BIN; [[ $v == B ]] && bin=$B_BIN
    "$bin" "$FILTER" 2>&1 | keep | sed "s/^/$v$r | /"
  done
done
if [[ -n ${KERNELS:-} ]]; then
  for v in A B; do
    bin=$A_BIN; [[ $v == B ]] && bin=$B_BIN
    echo "== $v: per-kernel times (Nsight Compute, $FILTER)"
    KERNELS=$KERNELS bash "$(dirname "$0")/gpu_kernel_times.sh" "$bin" "$FILTER"
  done
fi
