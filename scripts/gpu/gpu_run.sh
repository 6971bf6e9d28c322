#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over ${BUNDLE_DIR:-.device-build}/ (see gpu_bundle.sh):
# every test executable, then prints a short table. Results also go to $OUT when set.
set -uo pipefail
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "${BUNDLE_DIR:-.device-build}"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
LOG=${OUT:-/tmp}/gpu_tests.log
: > "$LOG"
printf '%-16s %-8s %s\n' "suite" "result" "summary" | tee -a "$LOG"
export DELTATUNE_SOURCE_DIR=$PWD DELTATUNE_BINARY_DIR=$PWD/${BUNDLE_DIR:-.device-build}
for t in ${BUNDLE_DIR:-.device-build}/bin/*_tests; do
  name=$(basename "$t")
  # Run from a tree whose build dir layout the tests expect (fixtures come from the source tree).
  out=$("$t" ${TEST_FILTER:-} 2>&1); rc=$?
  echo "$out" >> "$LOG"
  summary=$(echo "$out" | grep -E "All tests passed|test cases:" | tail -1)
  printf '%-16s %-8s %s\n' "$name" "$([[ $rc == 0 ]] && echo ok || echo FAIL)" "$summary" | tee -a "$LOG"
done
