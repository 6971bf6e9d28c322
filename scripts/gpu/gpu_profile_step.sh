#!/usr/bin/env bash
# The 27B-slice step on one GPU, per kernel: the top 25 kernels by GPU time of a CUPTI-profiled
# step (deltatune bench), with the automatic recompute policy and with per-layer recompute.
#   BUNDLE_DIR=.device-build bash scripts/gpu/gpu_profile_step.sh
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
for r in ${RECOMPUTE:-auto layer}; do
$B/daemon/deltatune bench --config configs/models/qwen3.8-27b-slice.json --steps ${STEPS:-3} --warmup 1 --recompute $r > /tmp/b_$r.json 2>/tmp/b_$r.err || cat /tmp/b_$r.err
python3 - /tmp/b_$r.json <<'PY'
import json,sys
d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(d["recompute"], "tok/s %.0f step %.1f ms (host enqueued at %.1f ms); profiled step %.1f ms, kernels busy %.1f ms; launches %d" % (d["tokens_per_s"], d["step_ms"], d["host_enqueue_ms"], d["profiled_step_ms"], d["compute_kernel_busy_ms_profiled_step"], d["kernel_launches_per_step"]))
tot=0
for k in d["top_kernels_profiled_step"]:
    tot+=k["ms"]; print("%8.2f ms %4d  %s" % (k["ms"], k["launches"], k["kernel"][:110]))
PY
done
