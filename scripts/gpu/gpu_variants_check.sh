#!/usr/bin/env bash
# Several prepared kernel variants in one device run (a lease's budget is short). The variants are
# the bundle's builds from scripts/gpu/bench_variants.sh, plain or .xz: bin/kernels_bench_v_<ref>,
# bin/kernels_tests_v_<ref>, daemon/deltatune_v_<ref>. For each variant with a test build, the
# fp64 GDN test (TEST; its cases take both recurrence widths); then ROUNDS alternating rounds of
# every kernels_bench variant over FILTER, each line labelled "<ref> <round> |", and the first
# round's result digests side by side; then, with STEP_ROUNDS > 0, alternating training steps of
# every deltatune variant (gpu_step_ab.sh). KERNELS (a regex of kernel names) adds Nsight Compute's
# per-kernel times of each variant over FILTER. VARIANTS (space-separated refs) picks some of the
# bundle's variants, in that order; TESTS=0 skips the tests, ROUNDS=0 the kernel rounds. On the
# GPU machine, over the bundle folder or a carried .carry/bundle.tar.xz of it:
#   FILTER='[gdn_bench]' ROUNDS=3 STEP_ROUNDS=2 bash scripts/gpu/gpu_variants_check.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
unpack_bundle "$B"
bundle_env "$B"
export DELTATUNE_SOURCE_DIR=$PWD DELTATUNE_BINARY_DIR=$PWD/$B NCCL_NVLS_ENABLE=0
TEST=${TEST:-chunked gated delta rule CUDA forward and backward match the fp64 recurrence}
FILTER=${FILTER:-[gdn_bench]}
# A variant that hangs (a copy whose barrier never completes) costs RUN_TIMEOUT seconds, not the call.
run() { timeout -k 5 "${RUN_TIMEOUT:-150}" "$@"; }
variants=()
if [[ -n ${VARIANTS:-} ]]; then
  read -ra variants <<< "$VARIANTS"
  for v in "${variants[@]}"; do
    [[ -x $B/bin/kernels_bench_v_$v ]] || { echo "no $B/bin/kernels_bench_v_$v" >&2; exit 2; }
  done
else
  for f in "$B"/bin/kernels_bench_v_*; do [[ -x $f ]] && variants+=("${f##*/kernels_bench_v_}"); done
fi
(( ${#variants[@]} )) || { echo "no bin/kernels_bench_v_* in $B (scripts/gpu/bench_variants.sh)" >&2; exit 2; }
echo "variants: ${variants[*]}"

echo "== $TEST, per variant"
for v in "${variants[@]}"; do
  t=$B/bin/kernels_tests_v_$v
  [[ -x $t && ${TESTS:-1} != 0 ]] || continue
  out=$(run "$t" "$TEST" 2>&1); rc=$?
  case $rc in 0) res=ok ;; 124 | 137) res=HUNG ;; *) res=FAIL ;; esac
  printf '%-16s %-4s %s\n' "$v" "$res" "$(echo "$out" | grep -E "All tests passed|test cases:" | tail -1)"
  [[ $rc == 0 ]] || echo "$out" | grep -E -A3 "FAILED|with expansion" | head -20
done

echo "== kernels: $FILTER, ${ROUNDS:-3} alternating rounds"
log=${OUT:-/tmp}/variants_kernels.txt
: > "$log"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in "${variants[@]}"; do
    run "$B/bin/kernels_bench_v_$v" "$FILTER" 2>&1 | keep_bench_lines | sed "s/^/$v $r | /" >> "$log"
  done
done
grep -v "digest" "$log" | sort -t'|' -k2,2 -s
echo "== result digests, round 1"
grep " 1 | .*digest" "$log"

if [[ -n ${KERNELS:-} ]]; then  # a regex of kernel names: their times per variant (gpu_kernel_times.sh)
  for v in "${variants[@]}"; do
    echo "== $v: per-kernel times (Nsight Compute, $FILTER)"
    KERNELS=$KERNELS bash "$(dirname "$0")/gpu_kernel_times.sh" "$B/bin/kernels_bench_v_$v" "$FILTER"
  done
fi

if (( ${STEP_ROUNDS:-0} > 0 )); then
  bins=()
  for v in "${variants[@]}"; do
    [[ -x $B/daemon/deltatune_v_$v ]] && bins+=("$B/daemon/deltatune_v_$v")
  done
  if (( ${#bins[@]} )); then
    echo "== step: ${STEP_ROUNDS} alternating rounds"
    BINS="${bins[*]}" ROUNDS=$STEP_ROUNDS bash "$(dirname "$0")/gpu_step_ab.sh"
  fi
fi
