#!/usr/bin/env bash
# After scripts/demo.sh: packs what scripts/gpu/check_export_transformers.py needs into .device-export/
# (git-ignored; carry it to the GPU machine, whose python3 has transformers): the exported
# checkpoint, the eval file tokenized exactly as the job tokenized it (`deltatune tokenize --chat`),
# and the daemon's last EVAL_METRICS eval_loss. Then, there:
#   python3 scripts/gpu/check_export_transformers.py --model .device-export/export \
#     --data .device-export/eval.jsonl --expect-loss "$(cat .device-export/expected_eval_loss)"
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
D=${DEMO_DIR:-/tmp/deltatune-demo}
OUT=.device-export
rm -rf "$OUT" && mkdir -p "$OUT/export"
cp "$D/outputs/demo-arithmetic/export/config.json" "$D/outputs/demo-arithmetic/export/model.safetensors" "$OUT/export/"
"$BUILD_DIR/daemon/deltatune" tokenize --chat --chat-template qwen3 \
  --tokenizer "$D/models/demo-tiny/tokenizer.json" --input "$D/data/arithmetic-eval.jsonl" >"$OUT/eval.jsonl"
python3 - "$D/events.jsonl" >"$OUT/expected_eval_loss" <<'PY'
import json, sys
evals = [json.loads(l) for l in open(sys.argv[1]) if '"EVAL_METRICS"' in l]
print(repr(evals[-1]["metrics"]["eval_loss"]))
PY
du -sh "$OUT"; cat "$OUT/expected_eval_loss"
