#!/usr/bin/env bash
# The headline comparison in one device run: the PyTorch peer at its best (bench_peer.py,
# transformers + flash-linear-attention, 1D packed, fused AdamW, every timed shape warmed; with
# and without per-layer checkpointing) next to `deltatune bench` (per-layer recompute, and the
# automatic policy) on the 27B-slice, and our step's time by part.
# Needs, carried: the bundle (gpu_bundle.sh), .peer/bench_peer.py (a copy of the shared script)
# and .carry/ (the fla package, unzipped from the flash-linear-attention and fla-core wheels).
#   BUNDLE_DIR=.device-build bash scripts/gpu/gpu_side_by_side.sh
# PEER_PROFILE=1 adds the peer's profiled step (kernel counts; the torch profiler takes minutes),
# PEER_CU=1 adds its document-isolated variant, PEER_TIMEOUT (s) bounds each peer run.
# AUTO_ONLY=1 runs only the rows without checkpointing (the peer's best and our automatic policy:
# about half the device time). WORKLOAD=chat feeds both the chat workload: the first 30% of each
# document unlabeled (`deltatune bench --workload chat`; the peer's packed labels masked alike).
# FP8=1 adds the FP8 rows: ours with `--projections fp8` (auto) and the peer under torchao's
# float8 training, rowwise (scripts/peer/float8_peer.py; torchao unzipped into .carry/ beside
# fla; PEER_FP8_ARGS, e.g. --compile-layers, go to it).
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
# A fresh machine holds only what was carried: unpack the carried bundle first.
unpack_bundle "$B"
[[ -x $B/daemon/deltatune ]] || { echo "no $B/daemon/deltatune: carry the bundle" >&2; exit 2; }
bundle_env "$B"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
O=${OUT:-/tmp}; CFG=configs/models/qwen3.8-27b-slice.json
field() { python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1].removeprefix('RESULT ')); print(d.get(sys.argv[2]))" "$@"; }
# FLA 0.5.2 refuses its gated chunk_bwd_dqkwg on Hopper with Triton 3.4-3.7.0 (its issue #640:
# wrong results; the image has Triton 3.6). The peer is timed with that guard lifted, so its
# backward's numbers are suspect but its speed is what it would be.
P=/tmp/peer; rm -rf $P; mkdir -p $P/bench; cp -r .carry $P/.carry; cp .peer/bench_peer.py $P/bench/
cp scripts/peer/float8_peer.py $P/bench/
sed -i 's/if g is not None and IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1:/if False:/' \
  $P/.carry/fla/ops/common/chunk_o.py
DT_WORKLOAD=()
if [[ ${WORKLOAD:-all} == chat ]]; then  # the same share unlabeled, by the same truncation
  grep -q '        labels = ids.clone()' $P/bench/bench_peer.py || { echo "peer: no packed labels line" >&2; exit 2; }
  sed -i "s/^        labels = ids.clone()$/        labels = ids.clone(); labels[0, torch.cat([torch.arange(s, s + int(0.3 * l), device=dev) for s, l in zip(__import__('itertools').accumulate([0] + list(b[:-1])), b)])] = -100/" \
    $P/bench/bench_peer.py
  DT_WORKLOAD=(--workload chat)
fi
peer() {  # NAME [flags...] (PEER_SCRIPT: another script beside bench_peer.py)
  local name=$1; shift
  timeout ${PEER_TIMEOUT:-200} python3 $P/bench/${PEER_SCRIPT:-bench_peer.py} --layers 8 --packed --fla --steps 6 "$@" > "$O/$name.log" 2>&1
  grep '^RESULT' "$O/$name.log" | tail -1 > "$O/$name.json" || tail -5 "$O/$name.log"
}
# The peer at its best (FLA kernels, 1D packing, fused AdamW; every timed shape warmed first):
# no activation checkpointing (fits in 83 GiB), and with per-layer checkpointing.
peer peer_ckpt0 --fused-adam --ckpt 0 ${PEER_PROFILE:+--profile} --tag fla-packed-fused-ckpt0
[[ ${AUTO_ONLY:-0} == 1 ]] || peer peer_ckpt1 --fused-adam --ckpt 1 --tag fla-packed-fused-ckpt1
[[ ${PEER_CU:-0} == 1 ]] && peer peer_cu --fused-adam --ckpt 0 --cu --tag fla-packed-cu  # documents kept apart
[[ ${FP8:-0} == 1 ]] && PEER_SCRIPT=float8_peer.py peer peer_fp8 --float8 rowwise ${PEER_FP8_ARGS:-} \
  --fused-adam --ckpt 0 --tag fla-packed-fused-ckpt0-float8-rowwise
[[ ${AUTO_ONLY:-0} == 1 ]] ||
  "$B/daemon/deltatune" bench --config $CFG --steps 10 --warmup 2 --recompute layer "${DT_WORKLOAD[@]}" > "$O/dt_layer.json" 2> "$O/dt_layer.err" || tail -5 "$O/dt_layer.err"
"$B/daemon/deltatune" bench --config $CFG --steps 10 --warmup 2 --recompute auto "${DT_WORKLOAD[@]}" > "$O/dt_auto.json" 2> "$O/dt_auto.err" || tail -5 "$O/dt_auto.err"
[[ ${FP8:-0} == 1 ]] &&
  { "$B/daemon/deltatune" bench --config $CFG --steps 10 --warmup 2 --recompute auto --projections fp8 "${DT_WORKLOAD[@]}" > "$O/dt_auto_fp8.json" 2> "$O/dt_auto_fp8.err" || tail -5 "$O/dt_auto_fp8.err"; }
printf '%-12s %-10s %-8s %-9s %s\n' run real_tok/s mfu peak_GiB kernels/step
for f in peer_ckpt0 peer_ckpt1 peer_cu peer_fp8; do
  [[ -s $O/$f.json ]] || continue
  printf '%-12s %-10s %-8s %-9s %s\n' $f "$(field $O/$f.json real_tok_s)" - "$(field $O/$f.json peak_gib)" "$(field $O/$f.json gpu_kernels)"
done
for f in dt_layer dt_auto dt_auto_fp8; do
  [[ -s $O/$f.json ]] || continue
  printf '%-12s %-10.0f %-8.3f %-9.2f %s\n' $f "$(field $O/$f.json tokens_per_s)" "$(field $O/$f.json mfu)" \
    "$(field $O/$f.json device_used_gib_cudaMemGetInfo)" "$(field $O/$f.json kernel_launches_per_step) / $(field $O/$f.json kernel_launches_per_layer) per layer"
done
for f in dt_layer dt_auto dt_auto_fp8; do
  [[ -s $O/$f.json ]] || continue
  echo "$f: step $(field $O/$f.json step_ms) ms, profiled $(field $O/$f.json profiled_step_ms) ms, by part $(field $O/$f.json step_breakdown_ms_profiled_step)"
done
field $O/peer_ckpt0.json impl_chunk_gated_delta_rule; field $O/peer_ckpt0.json fla_available
