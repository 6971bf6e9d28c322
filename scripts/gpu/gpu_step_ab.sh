#!/usr/bin/env bash
# Alternating A/B runs of `deltatune bench` on the 27B-slice: the bundle's binary (A) against an
# environment setting (AB_ENV) and/or another binary (B_BIN, e.g. a baseline build copied into
# the bundle as daemon/deltatune_base), ROUNDS times each, one line per run
# with the step's host-side figures (host enqueue time, GEMM heuristic queries and host time per
# step, the profiled step's GPU-busy time) and the profiled step's time by part (GEMMs, optimizer,
# GDN, loss, attention, other kernels, memsets and copies, idle). VARIANTS
# (semicolon-separated environment settings, e.g. "X=0;X=32") replaces A and B: each round runs
# every variant with the bundle's binary; BINS (space-separated binaries, e.g. the
# daemon/deltatune_v_<ref> builds of bench_variants.sh) replaces them too, each row labelled by
# the binary's <ref>; FLAG_VARIANTS (semicolon-separated bench flag sets, e.g. "--projections
# bf16;--projections fp8") makes each set a variant of the bundle's binary. BENCH_ARGS adds
# bench flags (e.g. "--layers 4" on an 80 GB card). Over the bundle of gpu_bundle.sh:
#   B_BIN=.device-build/daemon/deltatune_base BUNDLE_DIR=.device-build bash scripts/gpu/gpu_step_ab.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
CFG=configs/models/qwen3.8-27b-slice.json
O=${OUT:-/tmp}
row() {  # LABEL JSON
  python3 - "$@" <<'PY'
import json, sys
PARTS = ("gemm", "optimizer", "gdn", "loss", "attention", "other", "memset_memcpy", "idle")
d = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
g = lambda k: d.get(k) if d.get(k) is not None else float("nan")
p = d.get("step_breakdown_ms_profiled_step") or {}
print(f"{sys.argv[1]:<10} {g('tokens_per_s'):>8.0f} {g('step_ms'):>8.1f} {g('host_enqueue_ms'):>8.1f} "
      f"{g('profiled_step_ms'):>9.1f} {g('compute_kernel_busy_ms_profiled_step'):>8.1f} "
      f"{g('gemm_heuristic_queries_per_step'):>7.1f} {g('gemm_host_ms_per_step'):>7.2f} "
      f"{g('gemm_calls_per_step'):>6.0f} {g('peak_memory_gib'):>6.1f} "
      + " ".join(f"{p.get(k, float('nan')):>6.1f}" for k in PARTS))
PY
}
echo "run        tok/s    step_ms  enqueue  profiled  busy     queries gemm_ms calls  peakGiB  gemm  optim    gdn   loss   attn  other memops   idle"
if [[ -n ${BINS:-} ]]; then read -ra variants <<< "$BINS"
elif [[ -n ${VARIANTS:-} ]]; then IFS=';' read -ra variants <<< "$VARIANTS"
elif [[ -n ${FLAG_VARIANTS:-} ]]; then IFS=';' read -ra variants <<< "$FLAG_VARIANTS"; else variants=(A B); fi
for r in $(seq 1 ${ROUNDS:-3}); do
  for i in "${!variants[@]}"; do
    v=${variants[$i]}
    bin=$B/daemon/deltatune; flags=()
    if [[ -n ${BINS:-} ]]; then envs=(); bin=$v; label=$(basename "$v"); label=${label#deltatune_v_}
    elif [[ -n ${VARIANTS:-} ]]; then envs=($v); label=V$i
    elif [[ -n ${FLAG_VARIANTS:-} ]]; then envs=(); flags=($v); label=F$i
    elif [[ $v == A ]]; then envs=(); label=A
    else envs=(${AB_ENV:-}); label=B; bin=${B_BIN:-$bin}; fi
    timeout -k 5 "${RUN_TIMEOUT:-300}" env "${envs[@]}" "$bin" bench --config $CFG --steps ${STEPS:-10} --warmup 2 \
      --recompute ${RECOMPUTE:-auto} ${BENCH_ARGS:-} "${flags[@]}" > "$O/ab_$label$r.json" 2> "$O/ab_$label$r.err" || tail -3 "$O/ab_$label$r.err"
    [[ -s $O/ab_$label$r.err ]] || rm -f "$O/ab_$label$r.err"  # the device returns few files
    row "$label$r" "$O/ab_$label$r.json"
  done
done
if [[ -n ${BINS:-} ]]; then echo "binaries: $BINS"
elif [[ -n ${VARIANTS:-} ]]; then for i in "${!variants[@]}"; do echo "V$i: ${variants[$i]}"; done
elif [[ -n ${FLAG_VARIANTS:-} ]]; then for i in "${!variants[@]}"; do echo "F$i: ${variants[$i]}"; done
else echo "A: $B/daemon/deltatune (this bundle); B: ${B_BIN:-$B/daemon/deltatune} ${AB_ENV:-}"; fi
