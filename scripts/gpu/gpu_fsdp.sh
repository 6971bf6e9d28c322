#!/usr/bin/env bash
# FSDP runs on the GPU machine over the bundle (gpu_bundle.sh), printing a short table; JSON lines
# and logs stay in /tmp/fsdp, and all.log (every JSON line) goes to $OUT. Two parts:
#   one   (1 GPU):  27B-slice, single-device model (per-layer recompute, and the automatic
#                   policy) vs FSDP over NCCL at world size 1 (same seed: same losses), memory
#                   planner vs measured.
#   multi (N GPUs): [dist][cuda] tests (world-size-2 parity on a small model); 27B-slice parity
#                   world 1 (N micro-batches) vs world N (1 each) on the same global batches:
#                   losses and a strided sample of the parameters after 5 steps; scaling and exposed
#                   communication from world N's profiled step; a rank killed mid-step.
#   BUNDLE_DIR=.device-build bash scripts/gpu/gpu_fsdp.sh one|multi
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
export NCCL_NVLS_ENABLE=0
O=/tmp/fsdp; mkdir -p "$O"
DT="$B/daemon/deltatune"
CFG=configs/models/qwen3.8-27b-slice.json
N=$(nvidia-smi -L | wc -l)
field() { python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(d.get(sys.argv[2]))" "$@"; }

# bench NAME WORLD MICRO [extra flags...]: one process per rank, rank r on GPU r.
bench() {
  local name=$1 world=$2 micro=$3; shift 3
  local rdv; rdv=$(mktemp -d)
  for ((r = 0; r < world; r++)); do
    CUDA_VISIBLE_DEVICES=$r timeout 240 "$DT" bench --config $CFG --world-size "$world" --rank $r \
      --rendezvous "$rdv" --micro-batches "$micro" "$@" > "$O/$name.r$r.json" 2> "$O/$name.r$r.err" &
  done
  wait
}

if [[ ${1:-one} == one ]]; then
  "$DT" bench --config $CFG --steps 10 --warmup 1 > "$O/single.json" 2> "$O/single.err" || cat "$O/single.err"
  # The headline table's second row: the daemon's automatic recompute policy.
  "$DT" bench --config $CFG --steps 10 --warmup 1 --recompute auto > "$O/auto.json" 2> "$O/auto.err" || cat "$O/auto.err"
  bench fsdp1 1 1 --fsdp --steps 10 --warmup 1 || true
  cat "$O/fsdp1.r0.err"
  printf '%-14s %-10s %-10s %-9s %-10s %-10s %s\n' run tok/s step_ms mfu peak_GiB plan_GiB losses
  for f in single auto fsdp1.r0; do
    printf '%-14s %-10.0f %-10.1f %-9.3f %-10.2f %-10.2f %s\n' "$f" "$(field "$O/$f.json" tokens_per_s)" \
      "$(field "$O/$f.json" step_ms)" "$(field "$O/$f.json" mfu)" "$(field "$O/$f.json" device_used_gib_cudaMemGetInfo)" \
      "$(field "$O/$f.json" planner_peak_gib)" "$(field "$O/$f.json" losses)"
  done
  field "$O/fsdp1.r0.json" planner
  echo "auto chose recompute: $(field "$O/auto.json" recompute); planner $(field "$O/auto.json" planner)"
  for f in "$O"/*.json; do echo "$(basename "$f") $(tail -1 "$f")"; done > "${OUT:-/tmp}/all.log"
  exit 0
fi

echo "== [dist][cuda] tests on $N GPUs"
timeout 180 "$B/bin/runtime_tests" "[dist][cuda]" 2>&1 | grep -v "^ *tied=" | tail -25
echo "== 27B-slice parity: world 1 x $N micro-batches vs world $N x 1"
bench w1 1 "$N" --fsdp --steps 3 --warmup 1 --sample-out "$O/w1.sample"
bench wN "$N" 1 --steps 3 --warmup 1 --sample-out "$O/wN.sample"
bench s1 1 1 --fsdp --steps 3 --warmup 1
for f in w1.r0 wN.r0 wN.r1 s1.r0; do tail -3 "$O/${f}.err"; done
python3 - "$O" "$N" <<'PY'
import json, sys, numpy as np
O, N = sys.argv[1], int(sys.argv[2])
load = lambda f: json.loads(open(f"{O}/{f}.json").read().strip().splitlines()[-1])
w1, wn, s1 = load("w1.r0"), load("wN.r0"), load("s1.r0")
l1, ln = np.array(w1["losses"]), np.array(wn["losses"])
print("losses world 1:", ", ".join(f"{x:.6f}" for x in l1))
print(f"losses world {N}:", ", ".join(f"{x:.6f}" for x in ln))
print("max loss rel err: %.3e" % np.max(np.abs(l1 - ln) / np.abs(l1)))
a, b = np.fromfile(f"{O}/w1.sample", np.float32), np.fromfile(f"{O}/wN.sample", np.float32)
print("parameter sample: %d values, rel L2 diff %.3e, max abs diff %.3e" % (a.size, np.linalg.norm(a - b) / np.linalg.norm(a), np.abs(a - b).max()))
per_gpu = np.mean([load(f"wN.r{r}")["tokens_per_s"] for r in range(N)])
print("tokens/s per GPU: world 1 %.0f, world %d %.0f -> scaling efficiency %.1f%%" % (s1["tokens_per_s"], N, per_gpu, 100 * per_gpu / s1["tokens_per_s"]))
for k in ["step_ms", "mfu", "device_used_gib_cudaMemGetInfo", "planner_peak_gib", "comm_bytes_per_step_gib", "compute_kernel_busy_ms_profiled_step", "nccl_kernel_ms_profiled_step", "exposed_comm_ms_profiled_step", "nccl_kernels_per_step"]:
    print(f"  {k}: world1 {s1.get(k)}  world{N} {wn.get(k)}")
PY
echo "== fault: kill rank 1 of $N mid-run (NCCL timeout 20 s)"
rdv=$(mktemp -d)
for ((r = 0; r < N; r++)); do
  CUDA_VISIBLE_DEVICES=$r timeout 110 "$DT" bench --config $CFG --world-size "$N" --rank $r --rendezvous "$rdv" \
    --steps 400 --warmup 0 --timeout-ms 20000 > "$O/fault.r$r.json" 2> "$O/fault.r$r.err" &
  pids[$r]=$!
done
sleep 30; kill -9 "${pids[1]}"; t0=$(date +%s.%N)
for ((r = 0; r < N; r++)); do [[ $r == 1 ]] && continue; wait "${pids[$r]}"; echo "rank $r exit $? after $(python3 -c "import time;print('%.1f' % (time.time()-$t0))") s: $(tail -1 "$O/fault.r$r.err")"; done
pgrep -f "deltatune bench" && echo "STILL RUNNING (hang)" || echo "no process left"
echo "(exit 124 = killed by the 110 s guard: a hang)"
for f in "$O"/*.json; do echo "$(basename "$f") $(tail -1 "$f")"; done > "${OUT:-/tmp}/all.log"
