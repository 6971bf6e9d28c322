#!/usr/bin/env bash
# Loss curves, ours beside the PyTorch peer's (issue 56's first item): the same random initial
# weights (an HF folder from `deltatune init-model`, loaded by both), the same batches in the same
# order (`deltatune train --plan-out`; the peer reads that plan, train_plan_peer.py), AdamW at LR
# (default 1e-5) with WARMUP steps of warmup and cosine over STEPS (default 500). The peer runs
# twice (two torch seeds) for its own run-to-run spread. Prints max and mean |difference| of the
# loss and grad-norm curves; writes ours.csv, peer0.csv, peer1.csv (and curves.png where
# matplotlib is) under OUT. LAYERS (default 4) layers of the 27B config fit an 80 GB card.
# Needs, carried: the bundle (gpu_bundle.sh) and .carry/fla (as gpu_side_by_side.sh).
#   BUNDLE_DIR=.device-build bash scripts/gpu/gpu_loss_curves.sh
# A device call is limited to 10 minutes: OURS=0 skips our run and PEER_SEEDS (default "0 1")
# names the peer runs, so the three runs can go in separate calls (the model folder and the plan
# are the same in every call: same seeds); then compare_curves.py where the CSVs are. FP8=1 adds
# our run with FP8 projections (ours_fp8.csv), compared with ours.
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
unpack_bundle "$B"
bundle_env "$B"
W=${OUT:-/tmp/curves}; STEPS=${STEPS:-500}; LAYERS=${LAYERS:-4}
rm -rf "$W" && mkdir -p "$W"
python3 - "$W" "$LAYERS" <<'PY'
import json, math, random, sys
w, layers = sys.argv[1], int(sys.argv[2])
c = json.load(open("configs/models/qwen3.8-27b.json"))
text = c.get("text_config", c)
text["num_hidden_layers"] = layers
text["layer_types"] = text["layer_types"][:layers]
json.dump(c, open(f"{w}/config.json", "w"))
# Learnable documents: a sparse random bigram chain over 4096 ids, lognormal lengths as the bench's.
rng = random.Random(1)
vocab = 4096
nxt = [[rng.randrange(vocab) for _ in range(4)] for _ in range(vocab)]
with open(f"{w}/train.jsonl", "w") as f:
    for _ in range(6000):
        n = min(8192, max(16, int(math.exp(7.0 + 0.5 * rng.gauss(0, 1)))))
        t = [rng.randrange(vocab)]
        while len(t) < n:
            t.append(rng.choice(nxt[t[-1]]))
        f.write(json.dumps({"input_ids": t}) + "\n")
PY
"$B/daemon/deltatune" init-model --config "$W/config.json" --out "$W/model" --seed 1 --device cuda || exit 1
cat > "$W/job.yaml" <<YAML
model: $W/model
output_dir: $W/out
data: {train_files: [$W/train.jsonl], format: tokenized}
hyperparameters: {learning_rate: ${LR:-1e-5}, lr_schedule: cosine, warmup_steps: ${WARMUP:-25},
  max_steps: $STEPS, tokens_per_batch: 8192, max_grad_norm: 1.0, weight_decay: 0.0}
resources: {gpus: 1}
YAML
"$B/daemon/deltatune" train "$W/job.yaml" --plan-out "$W/plan.jsonl" || exit 1
# ours NAME JOB: our run of JOB, its STEP_METRICS as NAME.csv.
ours() {
t0=$(date +%s)
"$B/daemon/deltatune" train "$2" > "$W/$1.jsonl" 2> "$W/$1.err" || tail -5 "$W/$1.err"
echo "$1: $(( $(date +%s) - t0 )) s"
python3 - "$W" "$1" <<'PY'
import csv, json, sys
w, name = sys.argv[1], sys.argv[2]
with open(f"{w}/{name}.csv", "w", newline="") as f:
    out = csv.writer(f); out.writerow(["step", "loss", "grad_norm", "lr"])
    for line in open(f"{w}/{name}.jsonl"):
        j = json.loads(line)
        if j.get("event") == "STEP_METRICS":
            out.writerow([int(j["step"]), j["loss"], j["grad_norm"], j["lr"]])
PY
}
if [[ ${OURS:-1} == 1 ]]; then ours ours "$W/job.yaml"; fi
if [[ ${FP8:-0} == 1 ]]; then
  { cat "$W/job.yaml"; echo "precision: {projections: fp8}"; } > "$W/job_fp8.yaml"
  sed -i "s|output_dir: $W/out|output_dir: $W/out_fp8|" "$W/job_fp8.yaml"
  ours ours_fp8 "$W/job_fp8.yaml"
fi
for seed in ${PEER_SEEDS:-0 1}; do
  t0=$(date +%s)
  timeout "${PEER_TIMEOUT:-900}" python3 scripts/peer/train_plan_peer.py --fla --model "$W/model" \
    --plan "$W/plan.jsonl" --out "$W/peer$seed.csv" --lr "${LR:-1e-5}" --warmup "${WARMUP:-25}" \
    --seed $seed > "$W/peer$seed.log" 2>&1 || tail -5 "$W/peer$seed.log"
  echo "peer seed $seed: $(( $(date +%s) - t0 )) s"
done
if [[ -f $W/ours.csv && -f $W/peer0.csv && -f $W/peer1.csv ]]; then
  fp8=(); [[ -f $W/ours_fp8.csv ]] && fp8=(--fp8 "$W/ours_fp8.csv")
  python3 scripts/tools/compare_curves.py "$W/ours.csv" "$W/peer0.csv" "$W/peer1.csv" "${fp8[@]}" \
    --png "$W/curves.png"
fi
