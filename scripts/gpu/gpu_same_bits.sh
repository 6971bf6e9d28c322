#!/usr/bin/env bash
# Does a change leave the training step's numbers as they were, bit for bit? `deltatune bench`
# with this bundle's binary (twice: the run-to-run check) and a baseline's (B_BIN, e.g. the
# daemon/deltatune_base of build_baseline.sh) on the same seed: full fine-tuning with and without
# recompute, two micro-batches, clipping active, and LoRA; the per-step losses and gradient norms
# must be equal as printed (17 significant digits). The 27B-slice's full fine-tuning needs the
# H200's memory: on an 80 GB card give FULL_ARGS="--layers 4". ONLY (a regex) picks cases.
# Over the bundle of gpu_bundle.sh:
#   B_BIN=.device-build/daemon/deltatune_base BUNDLE_DIR=.device-build bash scripts/gpu/gpu_same_bits.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
bundle_env "$B"
A_BIN=$B/daemon/deltatune
B_BIN=${B_BIN:-$B/daemon/deltatune_base}
O=${OUT:-/tmp}
CFG=${CFG:-configs/models/qwen3.8-27b-slice.json}
cases=(
  "full-auto|--recompute auto ${FULL_ARGS:-}"
  "full-layer-micro2|--recompute layer --micro-batches 2 --max-grad-norm 0.05 ${FULL_ARGS:-}"
  "lora|--recompute auto --adapter lora --lora-rank 16"
)
bad=0
for c in "${cases[@]}"; do
  name=${c%%|*}; read -ra args <<< "${c#*|}"
  [[ $name =~ ${ONLY:-.} ]] || continue
  for run in A1 A2 B; do
    bin=$A_BIN; [[ $run == B ]] && bin=$B_BIN
    timeout -k 5 300 "$bin" bench --config "$CFG" --steps "${STEPS:-4}" --warmup 0 --seed 3 \
      "${args[@]}" > "$O/bits_${name}_$run.json" 2> "$O/bits_${name}_$run.err" ||
      { echo "$name $run failed:"; tail -3 "$O/bits_${name}_$run.err"; }
  done
  python3 - "$name" "$O/bits_${name}_A1.json" "$O/bits_${name}_A2.json" "$O/bits_${name}_B.json" <<'PY' || bad=1
import json, sys
name, paths = sys.argv[1], sys.argv[2:]
def read(p):
    try:
        d = json.loads(open(p).read().strip().splitlines()[-1])
        return [repr(x) for x in d["losses"]], [repr(x) for x in d["grad_norms"]]
    except Exception as e:  # a failed run
        return None, str(e)
a1, a2, b = (read(p) for p in paths)
same = lambda x, y: x[0] is not None and x == y
print(f"{name:<18} A1=A2 {same(a1, a2)}  A=baseline {same(a1, b)}  losses {a1[0]} grad norms {a1[1]}")
if not same(a1, b):
    print(f"{'':<18} baseline: losses {b[0]} grad norms {b[1]}")
sys.exit(0 if same(a1, b) else 1)
PY
done
echo "same bits: $([[ $bad == 0 ]] && echo yes || echo NO)"
exit $bad
