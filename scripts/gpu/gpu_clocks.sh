#!/usr/bin/env bash
# Is the GPU power-capped through a training step? nvidia-smi samples the SM clock, the power draw
# and the active clock-limiting reasons every 20 ms while `deltatune bench` (27B-slice,
# --recompute auto) runs, then while kernels_bench "[gemm_bench]" runs sustained GEMMs; prints
# the busy samples' clock and power range and the reasons seen (0x4: the software power cap).
#   BUNDLE_DIR=.device-build bash scripts/gpu/gpu_clocks.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
O=${OUT:-/tmp}
nvidia-smi --query-gpu=clocks.max.sm,power.limit --format=csv
R=clocks_event_reasons.active
nvidia-smi --query-gpu=$R --format=csv >/dev/null 2>&1 || R=clocks_throttle_reasons.active
sample() {  # FILE: samples in the background, prints the sampler's pid
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu,$R \
    --format=csv,noheader,nounits -lms 20 > "$1" &
  echo $!
}
summary() {  # FILE LABEL
  python3 - "$1" "$2" <<'PY'
import statistics as st
import sys
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if l.strip()]
busy = [r for r in rows if len(r) >= 5 and r[3].isdigit() and int(r[3]) >= 90]
if not busy:
    sys.exit(f"{sys.argv[2]}: no busy samples")
clk = [float(r[1]) for r in busy]
pw = [float(r[2]) for r in busy]
reasons = {}
for r in busy:
    reasons[r[4]] = reasons.get(r[4], 0) + 1
print(f"{sys.argv[2]}: {len(busy)} busy samples, SM clock MHz {min(clk):.0f}-{max(clk):.0f} "
      f"(median {st.median(clk):.0f}), power W median {st.median(pw):.0f} (max {max(pw):.0f}), "
      f"reasons {reasons}")
PY
}
p=$(sample "$O/clocks_bench.csv")
"$B/daemon/deltatune" bench --config configs/models/qwen3.8-27b-slice.json --steps 8 --warmup 2 \
  --recompute auto > "$O/clocks_bench.json" 2> "$O/clocks_bench.err"
kill "$p"
summary "$O/clocks_bench.csv" "training step (bench, auto)"
if [[ -x "$B/bin/kernels_bench" ]]; then
  p=$(sample "$O/clocks_gemm.csv")
  "$B/bin/kernels_bench" "[gemm_bench]" > "$O/clocks_gemm.txt" 2>&1
  kill "$p"
  summary "$O/clocks_gemm.csv" "sustained GEMMs (gemm_bench)"
fi
