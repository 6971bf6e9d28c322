#!/usr/bin/env bash
# One short device run for work on the wgmma attention kernels (bundle with
#   BUNDLE_DAEMON=0 BUNDLE_TESTS="kernels_tests kernels_bench" scripts/gpu/gpu_bundle.sh
# and carry .device-build): their [cuda] tests, each under a timeout (a barrier miscount hangs
# rather than fails), then their benchmark rows alone (alternating with those of the variants
# copied in beside it, see below). About a minute of device time, plus one per variant; full logs
# in $OUT when set.
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
LOG=${OUT:-/tmp}/gpu_attention.log
: > "$LOG"
for name in "wgmma gated attention forward matches the reference" \
            "wgmma attention lists past 1024 tile levels and 50k documents"; do
  out=$(timeout 120 "$B/bin/kernels_tests" "$name" 2>&1); rc=$?
  echo "$out" >> "$LOG"
  printf '%-6s %s: %s\n' "$([[ $rc == 0 ]] && echo ok || echo "FAIL($rc)")" "$name" \
    "$(echo "$out" | grep -E "All tests passed|test cases:" | tail -1)"
done
grep -E "^worst wgmma" "$LOG" | sort -u
rows() { timeout 120 "$1" "[attention_wgmma_bench]" 2>&1 | grep -E "wgmma attention|writing o|listing its|work list"; }
# Variants to compare: a baseline's bench binary copied in as kernels_bench_base, and any number
# of others as kernels_bench_v_<name> (`strip -o` each from its build). Alternating runs, since
# machines and runs differ by a few percent (more than most single changes gain).
variants=()
for f in "$B"/bin/kernels_bench_base "$B"/bin/kernels_bench_v_*; do [[ -x $f ]] && variants+=("$f"); done
if (( ${#variants[@]} )); then
  for r in 1 2 3; do
    for f in "${variants[@]}" "$B/bin/kernels_bench"; do
      echo "== $(basename "$f")"; rows "$f"
    done
  done
else
  rows "$B/bin/kernels_bench"
fi
