#!/usr/bin/env bash
# GPU training through the product's front doors, on the GPU machine over the bundle
# (gpu_bundle.sh): the [train] and [dist] tests (GPU engine vs CPU reference, empty shares, stop and
# resume through the sharded GPU checkpoint), then the demo job (configs/jobs/demo.yaml) with
# resources.gpus: N (every GPU present) submitted to a real deltatuned over gRPC: its N ranks train
# on the GPUs (FSDP over NCCL, world size N), checkpoint, are paused and resumed from the
# checkpoint, have the last rank killed mid-run (the others fail their collectives within the
# NCCL timeout; the supervisor restarts the job from its newest checkpoint), and export. Prints
# the job's losses and events; between the pause and the kill `deltatune profile` traces three of
# its steps (the kernel table, and a Chrome trace checked by category). JOB=demo-lora runs the LoRA demo job the same way (the base frozen
# in bf16 on the GPUs) and loads its PEFT export with peft (.carry/pylib on PYTHONPATH).
#   BUNDLE_DIR=.device-build [JOB=demo-lora] bash scripts/gpu/gpu_train.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
export NCCL_NVLS_ENABLE=0 PYTHONPATH=$PWD/.carry/pylib:${PYTHONPATH:-}
JOB=${JOB:-demo}
BIN=$PWD/$B/daemon
N=$(nvidia-smi -L | wc -l)  # the job takes every GPU: world size N
D=/tmp/gpu-train; rm -rf "$D"; mkdir -p "$D"/{models,data,outputs,state}

[[ ${SKIP_TESTS:-0} == 1 ]] || echo "== [train] and [dist] tests on the GPU"
[[ ${SKIP_TESTS:-0} == 1 ]] ||
timeout 300 "$B/bin/runtime_tests" "[train],[dist]" 2>&1 | grep -E "GPU|resume|empty|passed|failed|FAILED|skipped|with expansion" | head -40

echo "== the $JOB job with resources.gpus: $N through deltatuned"
source scripts/lib/daemon.sh
prepare_demo_job "$D" "$BIN" "$JOB" "{gpus: $N}"
start_daemon "$D" 7071 9091 "$BIN" || exit 1
echo "-- strict mode: the same job without kernels.allow_non_fused is refused at validation"
grep -v "allow_non_fused\|^kernels:" "$D/job.yaml" > "$D/strict.yaml"
"$BIN/deltatune" submit "$D/strict.yaml" 2>&1 | cut -c1-300
start=$(date +%s.%N)
job_json=$("$BIN/deltatune" submit "$D/job.yaml" --output json) || { cat "$D/deltatuned.log"; exit 1; }
job=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["name"])' "$job_json")
echo "submitted $job"
# Pause once a checkpoint exists, then resume: the rank restarts from the checkpoint.
for _ in $(seq 300); do
  "$BIN/deltatune" checkpoints "$job" 2>/dev/null | grep -q step && break
  sleep 0.2
done
"$BIN/deltatune" pause "$job" && sleep 3 && "$BIN/deltatune" get "$job" | head -5
"$BIN/deltatune" resume "$job"
# A profile of three steps of the running job (CUPTI on rank 0): the kernel table and a trace.
for _ in $(seq 100); do "$BIN/deltatune" get "$job" | grep -q RUNNING && break; sleep 0.2; done
timeout 120 "$BIN/deltatune" profile "$job" --steps 3 --out "${OUT:-/tmp}/profile.trace.json" | head -12
python3 - "${OUT:-/tmp}/profile.trace.json" <<'PY'
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
cats = collections.Counter(e.get("cat") for e in events if e["ph"] == "X")
print("trace events by category:", dict(cats))
PY
# Then kill its rank mid-run: the supervisor restarts it from the newest checkpoint.
sleep 2
rank=$(pgrep -f "deltatuned rank .*$job" | tail -1)  # the last rank spawned
if [[ -n $rank ]]; then kill -9 "$rank"; echo "killed rank pid $rank at $("$BIN/deltatune" get "$job" | head -1)"; fi
timeout 300 "$BIN/deltatune" watch "$job" > "$D/watch.log" 2>&1; echo "watch exit $?"
tail -2 "$D/watch.log"
"$BIN/deltatune" events "$job" --output json > "$D/events.jsonl" || true
python3 - "$D/events.jsonl" "$start" <<'PY'
import json, sys, time
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
types = [e.get("type") for e in events]
steps = [(e["metrics"].get("step"), e["metrics"]["loss"]) for e in events if e.get("type") == "STEP_METRICS"]
engines = [e.get("details", {}).get("engine") for e in events if e.get("type") == "TRAINING_STARTED"]
print("engines:", engines, " events:", {t: types.count(t) for t in dict.fromkeys(types)})
if steps:
    print(f"steps reported {len(steps)}: first loss {steps[0][1]:.4f}, final {steps[-1][1]:.4f}")
print("resumed:", [e.get("message") for e in events if e.get("type") == "RESUMED"])
last = [e["metrics"] for e in events if e.get("type") == "STEP_METRICS"][-1]
print("last step: mfu", last.get("mfu"), " gpu memory peak", last.get("gpu_memory_peak_bytes"),
      "planned", last.get("gpu_memory_planned_bytes"))
print("wall time %.1f s" % (time.time() - float(sys.argv[2])))
PY
grep -iE "error|warn" "$D/deltatuned.log" | head -5
python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9091/metrics").read().decode())' | grep -E "^deltatune_job_(mfu|gpu_memory_bytes|gpu_memory_planned_bytes|last_checkpoint_step)\{" | head -4
# A LoRA job's export is a PEFT folder: peft loads it onto the base.
exp=$(ls -d "$D"/outputs/*/export 2>/dev/null | head -1)
[[ -f $exp/adapter_config.json ]] && python3 - "$D/models/demo-tiny" "$exp" <<'PY'
import sys, torch, transformers
from peft import PeftModel
base = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
model = PeftModel.from_pretrained(base, sys.argv[2])
n = sum(1 for k, _ in model.named_parameters() if "lora_" in k)
ids = torch.randint(0, base.config.vocab_size, (1, 32))
print("PEFT loads the export:", n, "adapter tensors; logits finite:",
      bool(torch.isfinite(model(input_ids=ids).logits).all()))
PY
