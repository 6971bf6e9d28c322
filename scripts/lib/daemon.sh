# Sourced by scripts that drive a real deltatuned (demo.sh, gpu_train.sh).
# start_daemon DIR PORT HTTP_PORT BIN: writes DIR/daemon.yaml (state and roots under DIR), starts
# BIN/deltatuned in the background (log in DIR/deltatuned.log, pid in DAEMON, stopped on exit),
# exports DELTATUNE_ADDRESS and waits until it answers: this daemon, never another one already on
# PORT (its log must say it serves, and it must still run).
# free_port: a TCP port nothing listens on now (the kernel's pick on loopback).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_daemon() {
  local dir=$1 port=$2 http_port=$3 bin=$4
  cat > "$dir/daemon.yaml" <<YAML
listen:
  grpc: 127.0.0.1:$port
  http: 127.0.0.1:$http_port
state_dir: $dir/state
roots:
  models: [$dir/models]
  data: [$dir/data]
  outputs: [$dir/outputs]
YAML
  "$bin/deltatuned" --config "$dir/daemon.yaml" >"$dir/deltatuned.log" 2>&1 &
  DAEMON=$!
  trap 'kill $DAEMON 2>/dev/null || true; wait $DAEMON 2>/dev/null || true' EXIT
  export DELTATUNE_ADDRESS=127.0.0.1:$port
  for _ in $(seq 100); do
    kill -0 $DAEMON 2>/dev/null || { cat "$dir/deltatuned.log"; return 1; }
    if grep -q "^deltatuned: serving on" "$dir/deltatuned.log" &&
       "$bin/deltatune" list >/dev/null 2>&1 && kill -0 $DAEMON 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  echo "deltatuned did not answer on $port"; return 1
}

# prepare_demo_job DIR BIN JOB RESOURCES: the demo model (with the Qwen3 tokenizer), the
# arithmetic data and DIR/job.yaml (configs/jobs/JOB.yaml, 120 steps, the YAML RESOURCES line
# appended, and the ops the tiny model has no fused kernel for allowed by name: strict mode would
# refuse the job, and `deltatune kernels` lists them).
prepare_demo_job() {
  local dir=$1 bin=$2 job=$3 resources=$4
  "$bin/deltatune" init-model --config configs/models/demo-tiny.json --out "$dir/models/demo-tiny" --seed 0 >/dev/null
  tar -xJf tests/fixtures/tokenizer/tokenizers.tar.xz -C "$dir" qwen3/tokenizer.json
  cp "$dir/qwen3/tokenizer.json" "$dir/models/demo-tiny/"
  python3 scripts/fixtures/make_demo_dataset.py --out "$dir/data/arithmetic-train.jsonl" --count 2000 --seed 0
  python3 scripts/fixtures/make_demo_dataset.py --out "$dir/data/arithmetic-eval.jsonl" --count 64 --seed 1
  sed -e 's/max_steps: 40/max_steps: 120/' "configs/jobs/$job.yaml" > "$dir/job.yaml"
  echo "resources: $resources" >> "$dir/job.yaml"
  local allow
  allow=$("$bin/deltatune" kernels --model "$dir/models/demo-tiny" | awk '$2 == "simple" {print $1}' | paste -sd, -)
  echo "non-fused ops allowed for the tiny model: $allow"
  printf 'kernels:\n  allow_non_fused: [%s]\n' "$allow" >> "$dir/job.yaml"
}
