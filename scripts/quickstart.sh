#!/usr/bin/env bash
# The main job, until the daemon exists: builds, creates a random tiny Qwen3.5 checkpoint and runs
# one training step (forward, backward, AdamW) on a packed batch of chat-like documents.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-/tmp/deltatune-quickstart}
./scripts/build.sh
"$BUILD_DIR/daemon/deltatune" init-model --config configs/models/tiny-a.json --out "$OUT/model" --seed 0
"$BUILD_DIR/daemon/deltatune" step --model "$OUT/model" --batch configs/batches/tiny_batch.json \
  --grads-out "$OUT/grads.safetensors" --update-out "$OUT/update.safetensors" --lr 1e-5
echo "quickstart: checkpoint, gradients and updated parameters are in $OUT"
