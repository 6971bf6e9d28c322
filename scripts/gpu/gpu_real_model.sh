#!/usr/bin/env bash
# The real Qwen3.8-27B through a real job, in one device run over the bundle (gpu_bundle.sh):
#  1. `deltatune init-model --device cuda` writes the real-size bf16 checkpoint in the published
#     multimodal layout (about 54 GB; the GPU machine has 64 GiB of disk: nothing else that large).
#  2. A LoRA job (rank 16, every projection, 8192-token packed chat batches, STEPS steps) goes
#     through a real deltatuned: paused after its first checkpoint, resumed, run to its PEFT
#     export. A sampler records the peak RSS (VmHWM) of every rank process and of the daemon.
#  3. `deltatune bench` on the same config and adapter in the same run, for the tokens/s check.
#  4. With a build from before the streamed load in the bundle (daemon/deltatune-before, e.g. of
#     c99b1d2), the same job through its `deltatune train` for contrast: exit, peak RSS, swap.
# Prints one table (also $OUT/real_model.txt) and leaves the job's events in $OUT.
#   BUNDLE_DIR=.device-build [STEPS=50] [SKIP_JOB=1] bash scripts/gpu/gpu_real_model.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
unpack_bundle "$B"
bundle_env "$B"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
BIN=$PWD/$B/daemon
O=${OUT:-/tmp}
STEPS=${STEPS:-50}
D=${WORK_DIR:-/tmp/real27b}; rm -rf "$D"; mkdir -p "$D"/{models,data,outputs,state}
M=$D/models/qwen27b

echo "== init-model: Qwen3.8-27B, multimodal layout, bf16, on the GPU"
t0=$(date +%s.%N)
/usr/bin/time -f "init-model: %e s, peak RSS %M KiB" \
  "$BIN/deltatune" init-model --config configs/models/qwen3.8-27b-mm.json --out "$M" --device cuda || exit 1
t1=$(date +%s.%N)
du -sh "$M"; ls "$M" | head -3; echo "files: $(ls "$M" | wc -l)"
tar -xJf tests/fixtures/tokenizer/tokenizers.tar.xz -C "$D" qwen3_5/tokenizer.json
cp "$D/qwen3_5/tokenizer.json" "$M/"
df -h /tmp | tail -1; free -g | head -2

echo "== chat data: 4000 conversations of about 1,000-1,500 tokens"
python3 - "$D/data/chat-train.jsonl" <<'PY'
import json, random, sys
rng = random.Random(0)
words = ("the of and to in is was for on that with as by at from his her their model data train "
         "value layer token batch delta state gate rule memory vector matrix step loss rate "
         "attention linear chunk kernel stream device host shard rank export resume pause").split()
with open(sys.argv[1], "w") as f:
    for i in range(4000):
        q = " ".join(rng.choice(words) for _ in range(rng.randint(150, 400)))
        a = " ".join(rng.choice(words) for _ in range(rng.randint(600, 1100)))
        f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                         {"role": "assistant", "content": a}]}) + "\n")
PY

cat > "$D/job.yaml" <<YAML
display_name: real-27b-lora
model: qwen27b
output_dir: real-27b-lora
data:
  train_files: [chat-train.jsonl]
  format: chat
hyperparameters:
  learning_rate: 0.0001
  max_steps: $STEPS
  tokens_per_batch: 8192
adapter:
  type: lora
  rank: 16
  alpha: 32
  target_modules: [q_proj, k_proj, v_proj, o_proj, in_proj_qkv, in_proj_z, out_proj, gate_proj, up_proj, down_proj]
checkpoint:
  every_n_steps: 20
  keep_last_n: 2
resources: {gpus: 1}
seed: 0
YAML

# before_contrast: the same LoRA job with the old build's `deltatune train` (one process, no
# daemon), a few steps, sampled like the ranks: exit status, peak RSS, host memory and swap.
before_contrast() {
  [[ -x $BIN/deltatune-before ]] || return 0
  echo "== before: the same job with the old build ($BIN/deltatune-before train)"
  sed -e "s|^model: .*|model: $M|" -e "s|^output_dir: .*|output_dir: $D/outputs/before|" \
      -e "s|train_files: .*|train_files: [$D/data/chat-train.jsonl]|" \
      -e "s|max_steps: .*|max_steps: 3|" "$D/job.yaml" > "$D/job-before.yaml"
  free -g | head -2; swapon --show 2>/dev/null
  local t0 rc
  t0=$(date +%s)
  /usr/bin/time -f "before: exit %x after %e s, peak RSS %M KiB" timeout 420 \
    "$BIN/deltatune-before" train "$D/job-before.yaml" > "$D/before.log" 2>&1 &
  local pid=$! min_avail=999999999 a
  while kill -0 $pid 2>/dev/null; do
    a=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
    (( a < min_avail )) && min_avail=$a
    sleep 1
  done
  wait $pid; rc=$?
  echo "before: exit $rc after $(( $(date +%s) - t0 )) s, lowest MemAvailable $(( min_avail / 1024 )) MiB"
  grep -E "before:|MODEL_LOADED|TRAINING_STARTED|STEP_METRICS|rror|Killed" "$D/before.log" | cut -c1-240 | tail -8
  dmesg 2>/dev/null | grep -iE "out of memory|oom" | tail -2
  free -g | head -2
}

echo "== the LoRA job through deltatuned"
[[ ${SKIP_JOB:-0} == 1 ]] && { before_contrast; exit 0; }
source scripts/lib/daemon.sh
start_daemon "$D" 7071 9091 "$BIN" || exit 1
# Peak RSS (VmHWM, KiB) of the daemon and of every rank process, sampled every 0.5 s.
( while sleep 0.5; do
    for p in $DAEMON $(pgrep -f "deltatuned rank" || true); do
      h=$(awk '/VmHWM/ {print $2}' /proc/$p/status 2>/dev/null) && echo "$p $h"
    done
  done > "$D/rss.log" ) &
SAMPLER=$!
start=$(date +%s.%N)
job_json=$("$BIN/deltatune" submit "$D/job.yaml" --output json) || { tail -20 "$D/deltatuned.log"; exit 1; }
job=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["name"])' "$job_json")
echo "submitted $job"
for _ in $(seq 1500); do  # pause once the first checkpoint is committed, then resume
  "$BIN/deltatune" checkpoints "$job" 2>/dev/null | grep -q step && break
  "$BIN/deltatune" get "$job" 2>/dev/null | grep -qE "FAILED|CANCELLED" && break
  sleep 0.2
done
"$BIN/deltatune" pause "$job" && sleep 2
for _ in $(seq 300); do "$BIN/deltatune" get "$job" | grep -q PAUSED && break; sleep 0.5; done
"$BIN/deltatune" get "$job" | head -2
"$BIN/deltatune" resume "$job"
timeout 330 "$BIN/deltatune" watch "$job" > "$D/watch.log" 2>&1; echo "watch exit $?"
tail -2 "$D/watch.log"
kill $SAMPLER 2>/dev/null
"$BIN/deltatune" events "$job" --output json > "$O/real_events.jsonl" || true
cp "$D/rss.log" "$O/real_rss.log" 2>/dev/null
grep -iE "error|fail" "$D/deltatuned.log" | head -5
exp=$(ls -d "$D"/outputs/*/export 2>/dev/null | head -1)
echo "export: $exp"; ls -la "$exp" 2>/dev/null | head
"$BIN/deltatune" list 2>/dev/null | head -3

echo "== deltatune bench on the same config in the same run"
"$BIN/deltatune" bench --config configs/models/qwen3.8-27b.json --adapter lora --lora-rank 16 \
  --recompute auto --steps 8 --warmup 2 > "$O/real_bench.json" 2> "$O/real_bench.err" || tail -5 "$O/real_bench.err"

python3 - "$O/real_events.jsonl" "$D/rss.log" "$O/real_bench.json" "$start" "$DAEMON" "$t0" "$t1" <<'PY' | tee "$O/real_model.txt"
import json, sys, datetime
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def ts(e):
    t = e.get("time")
    return datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() if t else None
start, daemon = float(sys.argv[4]), sys.argv[5]
by = lambda t: [e for e in events if e.get("type") == t]
first = lambda t: (by(t) or [None])[0]
def at(t):
    e = first(t)
    return f"{ts(e) - start:.1f} s" if e and ts(e) else "-"
print(f"init-model (27B, bf16, GPU generator, write): {float(sys.argv[7]) - float(sys.argv[6]):.1f} s")
for t in ("MODEL_LOADED", "DATA_LOADED", "ENGINE_READY", "TRAINING_STARTED", "STEP_METRICS", "CHECKPOINT_COMMITTED",
          "RESUMED", "EXPORT_COMPLETED"):
    print(f"{t:22s} at {at(t)} after submit", json.dumps(first(t).get("metrics", {})) if first(t) and t in ("MODEL_LOADED", "DATA_LOADED", "ENGINE_READY") else "")
steps = [e["metrics"] for e in by("STEP_METRICS")]
print("steps reported:", len(steps), " types:", {t: sum(1 for e in events if e.get("type") == t) for t in dict.fromkeys(e.get("type") for e in events)})
if steps:
    tail = steps[len(steps) // 2:]
    tps = sorted(s["tokens_per_second"] for s in tail)
    print(f"job tok/s (second half, per-step window): median {tps[len(tps)//2]:.0f}, range {tps[0]:.0f}-{tps[-1]:.0f}")
    print("loss first/last: %.4f / %.4f" % (steps[0]["loss"], steps[-1]["loss"]))
    print("gpu memory peak %.2f GiB, planner %.2f GiB" % (steps[-1].get("gpu_memory_peak_bytes", 0) / 2**30, steps[-1].get("gpu_memory_planned_bytes", 0) / 2**30))
peak = {}
for line in open(sys.argv[2]):
    p, kib = line.split()
    peak[p] = max(peak.get(p, 0), int(kib))
print("peak RSS daemon: %.2f GiB" % (peak.get(daemon, 0) / 2**20))
print("peak RSS ranks:", ", ".join("%.2f GiB" % (v / 2**20) for p, v in peak.items() if p != daemon))
try:
    b = json.loads(open(sys.argv[3]).read().strip().splitlines()[-1].removeprefix("RESULT "))
    print(f"bench tok/s: {b.get('tokens_per_s'):.0f}  peak {b.get('device_used_gib_cudaMemGetInfo')} GiB  planner {b.get('planner_peak_gib')} GiB  recompute {b.get('recompute')}")
except Exception as e:
    print("bench: no result", e)
PY
before_contrast
