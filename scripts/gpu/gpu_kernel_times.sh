#!/usr/bin/env bash
# Per-kernel GPU time of a command, from Nsight Compute's gpu__time_duration (needs the machine's
# hardware counters: the Firecracker runtime; clocks left alone as METHOD.md asks). Prints each
# kernel's launch count and median / total microseconds, in launch order. Where timing one
# fused op with CUDA events cannot say which of its launches takes the time (a sort, a partials
# pass), this can. Run on the GPU machine:
#   KERNELS='embedding|Radix|iota' scripts/gpu/gpu_kernel_times.sh .device-build/bin/kernels_bench
set -euo pipefail
NCU=${NCU:-/opt/nvidia/nsight-compute/2025.3.1/ncu}
csv=$(mktemp)
"$NCU" --clock-control none --csv --metrics gpu__time_duration.sum \
  -k "regex:${KERNELS:-.}" -c "${MAX_LAUNCHES:-400}" "$@" > "$csv" 2>/dev/null || true
python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
times = {}
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(
        r["Metric Unit"], 1.0)
    name = r["Kernel Name"].split("(")[0][:60]
    times.setdefault(name, []).append(float(r["Metric Value"].replace(",", "")) * scale)
print(f"{'kernel':60s} {'launches':>8s} {'median us':>10s} {'total us':>10s}")
for name, t in times.items():
    print(f"{name:60s} {len(t):8d} {statistics.median(t):10.2f} {sum(t):10.1f}")
PY
