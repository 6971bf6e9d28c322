#!/usr/bin/env bash
# LoRA on the GPU in one device run: the [cuda][lora] tests (the GPU step against the CPU
# reference on the LoRA parity fixtures, a GPU LoRA job against the CPU one, resume), then the
# full 64-layer Qwen3.8-27B under `deltatune bench --adapter lora` beside the peer
# (scripts/peer/bench_peer_lora.py: transformers + peft + FLA, the same widths and batches,
# every shape warmed first), and the same pair on the 8-layer slice.
# Needs, carried: the bundle (gpu_bundle.sh) and .carry/ (fla unzipped from the
# flash-linear-attention and fla-core wheels; pylib/ with peft and accelerate unzipped).
#   BUNDLE_DIR=.device-build bash scripts/gpu/gpu_lora.sh
# LORA_RANK (16), STEPS (6), PEER_TIMEOUT (s, each peer run) and SKIP_TESTS=1 tune it.
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.carry/pylib:${PYTHONPATH:-}
O=${OUT:-/tmp}; R=${LORA_RANK:-16}; N=${STEPS:-6}
field() { python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1].removeprefix('RESULT ')); print(d.get(sys.argv[2]))" "$@"; }
if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  echo "== [lora] tests (CPU and CUDA)"
  "$B/bin/runtime_tests" "[lora]" 2>&1 | grep -E "gpu lora|GPU LoRA|passed|failed|FAILED|REQUIRE|CHECK|with expansion" | head -60
fi
# The peer from a scratch copy whose ../.carry holds fla (as the shared script expects).
P=/tmp/peer; rm -rf $P; mkdir -p $P/bench; cp -r .carry $P/.carry; cp scripts/peer/bench_peer_lora.py $P/bench/
sed -i 's/if g is not None and IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1:/if False:/' \
  $P/.carry/fla/ops/common/chunk_o.py 2>/dev/null
peer() {  # NAME LAYERS [flags...]
  local name=$1 layers=$2; shift 2
  timeout ${PEER_TIMEOUT:-420} python3 $P/bench/bench_peer_lora.py --layers $layers --packed --fla \
    --fused-adam --lora $R --steps $N "$@" > "$O/$name.log" 2>&1
  grep '^RESULT' "$O/$name.log" | tail -1 > "$O/$name.json" || tail -5 "$O/$name.log"
}
ours() {  # NAME CONFIG [flags...]
  local name=$1 cfg=$2; shift 2
  "$B/daemon/deltatune" bench --config $cfg --steps $N --warmup 2 --adapter lora --lora-rank $R "$@" \
    > "$O/$name.json" 2> "$O/$name.err" || tail -5 "$O/$name.err"
}
echo "== 8-layer slice, LoRA rank $R"
ours dt_slice configs/models/qwen3.8-27b-slice.json --recompute auto
peer peer_slice 8 --ckpt 0 --tag lora-slice-ckpt0
echo "== full 64-layer Qwen3.8-27B, LoRA rank $R"
ours dt_full configs/models/qwen3.8-27b.json --recompute auto
peer peer_full 64 --ckpt 1 --tag lora-full-ckpt1
printf '%-11s %-10s %-7s %-9s %-10s %s\n' run real_tok/s mfu peak_GiB planner recompute/launches
for f in dt_slice dt_full; do
  [[ -s $O/$f.json ]] || continue
  printf '%-11s %-10.0f %-7.3f %-9.2f %-10.2f %s\n' $f "$(field $O/$f.json tokens_per_s)" "$(field $O/$f.json mfu)" \
    "$(field $O/$f.json device_used_gib_cudaMemGetInfo)" "$(field $O/$f.json planner_peak_gib)" \
    "$(field $O/$f.json recompute) / $(field $O/$f.json kernel_launches_per_layer) per layer"
done
for f in peer_slice peer_full; do
  [[ -s $O/$f.json ]] || continue
  printf '%-11s %-10s %-7s %-9s\n' $f "$(field $O/$f.json real_tok_s)" - "$(field $O/$f.json peak_gib)"
done
for f in dt_slice dt_full; do
  [[ -s $O/$f.json ]] && echo "$f: step $(field $O/$f.json step_ms) ms, by part $(field $O/$f.json step_breakdown_ms_profiled_step), losses $(field $O/$f.json losses)"
done
for f in peer_slice peer_full; do
  [[ -s $O/$f.json ]] && echo "$f: trainable $(field $O/$f.json trainable_params) of $(field $O/$f.json params), loss $(field $O/$f.json loss)"
done
