#!/usr/bin/env bash
# GPU ranks on a node agent, on the GPU machine over the bundle (gpu_bundle.sh): the demo job with
# one GPU trained by the supervisor's own rank, then the same job with resources.nodes: 1 placed
# on a `deltatuned agent` of the same machine (the rank spawned by the agent, its reports and
# rendezvous relayed through it). Prints both runs' losses and export digests: they must match.
# This is the code path of GPU jobs across machines (placement, orders, relay, the NCCL unique id
# through the supervisor's store) on the one machine a lease gives.
#   BUNDLE_DIR=.device-build bash scripts/gpu/gpu_agent.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
export NCCL_NVLS_ENABLE=0
BIN=$PWD/$B/daemon
D=/tmp/gpu-agent; rm -rf "$D"; mkdir -p "$D"/{models,data,outputs,state}
source scripts/lib/daemon.sh
prepare_demo_job "$D" "$BIN" demo "{gpus: 1}"
sed -e 's/^output_dir: .*/output_dir: on-agent/' -e 's/^resources: .*/resources: {gpus: 1, nodes: 1}/' \
  "$D/job.yaml" > "$D/agent-job.yaml"
start_daemon "$D" 7072 9092 "$BIN" || exit 1
"$BIN/deltatuned" agent --supervisor 127.0.0.1:7072 --hostname gpu-node --address 127.0.0.1 \
  --state-dir "$D/agent" > "$D/agent.log" 2>&1 &
AGENT=$!
trap 'kill $AGENT $DAEMON 2>/dev/null; wait $AGENT $DAEMON 2>/dev/null' EXIT

run_job() {  # run_job YAML: submits, waits, prints "name final-loss export-digest"
  local json name
  json=$("$BIN/deltatune" submit "$1" --output json) || { cat "$D/deltatuned.log"; return 1; }
  name=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["name"])' "$json")
  timeout 300 "$BIN/deltatune" watch "$name" > "$D/watch-$(basename "$1").log" 2>&1
  "$BIN/deltatune" events "$name" --output json > "$D/events-$(basename "$1").jsonl"
  python3 - "$D/events-$(basename "$1").jsonl" "$name" <<'PY'
import hashlib, json, os, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = {int(e["metrics"]["step"]): e["metrics"]["loss"] for e in events if e.get("type") == "STEP_METRICS"}
done = [e for e in events if e.get("type") in ("SUCCEEDED", "FAILED")]
where = [e.get("details", {}).get("placement", "supervisor") for e in events if e.get("type") == "ADMITTED"]
path = done[-1].get("details", {}).get("path", "") if done else ""
digest = hashlib.sha256()
for f in sorted(os.listdir(path)) if path and os.path.isdir(path) else []:
    digest.update(open(os.path.join(path, f), "rb").read())
print(f"{sys.argv[2]}: {done[-1]['type'] if done else 'unfinished'} on {where}, "
      f"{len(steps)} steps, loss {steps.get(1, 0):.6f} -> {steps.get(max(steps), 0) if steps else 0:.6f}, "
      f"export sha256 {digest.hexdigest()[:16]}")
json.dump(steps, open(sys.argv[1] + ".steps", "w"))
PY
}
echo "== the demo job on the supervisor's own GPU rank"
run_job "$D/job.yaml"
echo "== the same job placed on the agent"
for _ in $(seq 50); do grep -q registered "$D/agent.log" && break; sleep 0.2; done
run_job "$D/agent-job.yaml"
python3 - "$D/events-job.yaml.jsonl.steps" "$D/events-agent-job.yaml.jsonl.steps" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
same = a == b and len(a) > 0
print(f"steps equal on both: {same} ({len(a)} and {len(b)} steps)")
PY
echo "== strict kernels judged on the agent: a supervisor without a GPU takes the job, its rank refuses"
kill $DAEMON; wait $DAEMON 2>/dev/null
grep -v "allow_non_fused\|^kernels:" "$D/agent-job.yaml" | sed 's/^output_dir: .*/output_dir: strict/' > "$D/strict.yaml"
CUDA_VISIBLE_DEVICES= start_daemon "$D" 7072 9092 "$BIN" || exit 1
trap 'kill $AGENT $DAEMON 2>/dev/null; wait $AGENT $DAEMON 2>/dev/null' EXIT
for _ in $(seq 50); do [[ $(grep -c registered "$D/agent.log") -ge 2 ]] && break; sleep 0.2; done
json=$("$BIN/deltatune" submit "$D/strict.yaml" --output json) && name=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["name"])' "$json")
timeout 120 "$BIN/deltatune" watch "$name" > /dev/null 2>&1
"$BIN/deltatune" get "$name" --output json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["state"], j.get("stateReason"), j.get("errorMessage", "")[:200])'
tail -3 "$D/agent.log"
