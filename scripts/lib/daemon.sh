# Sourced by scripts that drive a real deltatuned (demo.sh, gpu_train.sh).
# start_daemon DIR PORT HTTP_PORT BIN: writes DIR/daemon.yaml (state and roots under DIR), starts
# BIN/deltatuned in the background (log in DIR/deltatuned.log, pid in DAEMON, stopped on exit),
# exports DELTATUNE_ADDRESS and waits until it answers.
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
    "$bin/deltatune" list >/dev/null 2>&1 && return 0
    kill -0 $DAEMON 2>/dev/null || { cat "$dir/deltatuned.log"; return 1; }
    sleep 0.2
  done
  echo "deltatuned did not answer on $port"; return 1
}
