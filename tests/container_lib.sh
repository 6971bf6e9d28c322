# Sourced by image_test.sh and deb_test.sh: a cached Debian 12 root, podman as this machine runs
# it, and the demo job run against a deltatuned in a container from outside.
# Callers set W (a scratch folder, removed on exit) and source this after `set -euo pipefail`.
SRC=$DELTATUNE_SOURCE_DIR
BIN=$DELTATUNE_BINARY_DIR/daemon
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[[ $(id -u) == 0 ]] || skip "building a root and running rootful podman need root"
for tool in podman runc debootstrap; do
  command -v $tool >/dev/null || skip "no $tool (scripts/install-deps.sh --tests installs it)"
done
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/deltatune
# This machine's podman: runc (crun refuses hybrid cgroups), the host's network, and limits at or
# below the shell's own (podman's defaults are above what a sandboxed machine may set).
PODMAN=(podman --runtime runc)
NOFILE=$(ulimit -Hn)
((NOFILE > 65536)) && NOFILE=65536
RUN_FLAGS=(--network host --ulimit "nofile=$NOFILE:$NOFILE" --ulimit nproc=4096:4096)
IMAGES=()
CONTAINERS=()
cleanup() {
  for c in "${CONTAINERS[@]}"; do podman rm -f "$c" >/dev/null 2>&1 || true; done
  for i in "${IMAGES[@]}"; do podman rmi -f "$i" >/dev/null 2>&1 || true; done
  rm -rf "$W"
}
trap cleanup EXIT
TAG=$(basename "$W" | tr 'A-Z' 'a-z')

# A Debian 12 minbase root as a tarball, debootstrapped from the mirror once and cached.
base_tar() {
  local tar=$CACHE/debian-12-minbase.tar
  if [[ ! -s $tar ]]; then
    mkdir -p "$CACHE"
    echo "debootstrap: a Debian 12 minbase root (cached at $tar)" >&2
    debootstrap --variant=minbase bookworm "$W/debootstrap" http://deb.debian.org/debian \
      >"$W/debootstrap.log" 2>&1 || { tail -20 "$W/debootstrap.log" >&2; return 1; }
    tar -C "$W/debootstrap" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$W/debootstrap"
  fi
  echo "$tar"
}

# demo_volume DIR: the demo's model (with the Qwen3 tokenizer) and data under DIR/{models,data},
# empty DIR/{outputs,state}, all owned by uid:gid $2.
demo_volume() {
  local v=$1 owner=$2
  mkdir -p "$v"/{models,data,outputs,state}
  (cd "$SRC" &&
    "$BIN/deltatune" init-model --config configs/models/demo-tiny.json --out "$v/models/demo-tiny" \
      --seed 0 >/dev/null &&
    tar -xJf tests/fixtures/tokenizer/tokenizers.tar.xz -C "$W" qwen3/tokenizer.json &&
    cp "$W/qwen3/tokenizer.json" "$v/models/demo-tiny/" &&
    python3 scripts/fixtures/make_demo_dataset.py --out "$v/data/arithmetic-train.jsonl" --count 2000 --seed 0 &&
    python3 scripts/fixtures/make_demo_dataset.py --out "$v/data/arithmetic-eval.jsonl" --count 64 --seed 1)
  chown -R "$owner" "$v"
}

source "$SRC/scripts/lib/daemon.sh"  # free_port

# wait_serving CONTAINER: until the daemon in it answers at $DELTATUNE_ADDRESS and its log says
# it serves (this daemon, not another on the port).
wait_serving() {
  local c=$1
  for _ in $(seq 150); do
    [[ $(podman inspect -f '{{.State.Running}}' "$c") == true ]] ||
      { podman logs "$c"; fail "deltatuned exited in the container"; }
    if "$BIN/deltatune" list >/dev/null 2>&1 && podman logs "$c" 2>&1 | grep -q "^deltatuned: serving on"; then
      return 0
    fi
    sleep 0.2
  done
  podman logs "$c"
  fail "deltatuned in the container does not answer at $DELTATUNE_ADDRESS"
}

# container_processes CONTAINER: "UID ARGS;" for each process in it, the uid as the kernel has it.
container_processes() {
  local pid args
  podman top "$1" hpid args | tail -n +2 | while read -r pid args; do
    printf '%s %s;' "$(awk '/^Uid:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo gone)" "$args"
  done
}

# demo_job CONTAINER VOLUME UID: submits configs/jobs/demo.yaml from outside, waits for it, and
# checks: SUCCEEDED, the export on the volume owned by UID, every process in the container (the
# daemon, and the rank seen while it trained) running as UID.
demo_job() {
  local c=$1 v=$2 uid=$3 allow job state="" procs=""
  allow=$("$BIN/deltatune" kernels --model "$v/models/demo-tiny" | awk '$2 == "simple" {print $1}' | paste -sd, -)
  { cat "$SRC/configs/jobs/demo.yaml"; printf 'kernels:\n  allow_non_fused: [%s]\n' "$allow"; } >"$W/job.yaml"
  job=$("$BIN/deltatune" submit "$W/job.yaml" --output json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["name"])')
  local start=$SECONDS
  for _ in $(seq 1200); do
    state=$("$BIN/deltatune" get "$job" --output json |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    if [[ $state == RUNNING && $procs != *rank* ]]; then procs=$(container_processes "$c"); fi
    [[ $state == SUCCEEDED || $state == FAILED || $state == CANCELLED ]] && break
    sleep 0.5
  done
  echo "job $job: $state in $((SECONDS - start)) s; processes while it trained: $procs"
  [[ $state == SUCCEEDED ]] || { podman logs "$c" 2>&1 | tail -20; "$BIN/deltatune" get "$job"; fail "$state"; }
  local export=$v/outputs/demo-arithmetic/export
  for f in config.json model.safetensors tokenizer.json; do
    [[ -s $export/$f ]] || fail "the export lacks $f"
  done
  [[ $(stat -c %u "$export/model.safetensors") == "$uid" ]] ||
    fail "the export is owned by uid $(stat -c %u "$export/model.safetensors"), not $uid"
  [[ $procs == *rank* ]] || fail "no rank process seen: $procs"
  local other
  other=$(tr ';' '\n' <<<"$procs" | awk -v u="$uid" 'NF && $1 != u' || true)
  [[ -z $other ]] || fail "processes not running as uid $uid: $other"
}
