#!/usr/bin/env bash
# Where the GPU idles in a training step: `deltatune bench` on the 27B-slice with the profiled
# step's timeline written (--trace-out), then scripts/tools/trace_gaps.py's report of its idle gaps and
# the host calls during them. The trace stays in $OUT (or /tmp) for chrome://tracing or Perfetto.
# Recording the host's CUDA calls slows the host a little: compare the idle time with a run of
# gpu_step_ab.sh, which records none.
#   BUNDLE_DIR=.device-build [RECOMPUTE=auto] bash scripts/gpu/gpu_trace_step.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
O=${OUT:-/tmp}
"$B/daemon/deltatune" bench --config configs/models/qwen3.8-27b-slice.json --steps ${STEPS:-4} \
  --warmup 2 --recompute ${RECOMPUTE:-auto} --trace-out "$O/step_trace.json" > "$O/trace_bench.json" \
  2> "$O/trace_bench.err" || { tail -5 "$O/trace_bench.err"; exit 1; }
python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); \
print('timed steps', round(d['step_ms'], 1), 'ms (median, mean', round(d['mean_real_tokens_per_rank_step']), \
'tokens); profiled step', round(d['profiled_step_ms'], 1), 'ms,', round(d['profiled_step_tokens']), 'tokens, host waits', \
f\"{100 * d['host_wait_share_profiled_step']:.2f}%; by part\", \
{k: round(v, 2) for k, v in d['step_breakdown_ms_profiled_step'].items()})" "$O/trace_bench.json"
python3 scripts/tools/trace_gaps.py "$O/step_trace.json" --top ${TOP:-20}
