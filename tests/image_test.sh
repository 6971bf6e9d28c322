#!/usr/bin/env bash
# The container image, built without a registry and run: a Debian 12 root (debootstrap from the
# package mirror, cached) plus the runtime tree of scripts/assemble-runtime.sh (the script
# deploy/Dockerfile runs), imported into podman. deltatuned runs in it as the image starts it
# (its entrypoint and user; a config mounted over the default one, a volume at
# /var/lib/deltatune), the CLI outside submits the demo job on CPU, and the job SUCCEEDS with its
# export on the volume, the daemon and its rank running as the unprivileged user 10001.
# Needs root, podman, runc and debootstrap (scripts/install-deps.sh --tests); skips without them.
set -euo pipefail
W=$(mktemp -d /tmp/deltatune-image-XXXXXX)
source "$(dirname "$0")/container_lib.sh"

# 1. The image: base root, runtime tree and user by the Dockerfile's script, imported.
mkdir "$W/root"
tar -C "$W/root" -xf "$(base_tar)"
chroot "$W/root" ldconfig -p >"$W/base-libs.txt"
BUILD_DIR=$DELTATUNE_BINARY_DIR "$SRC/scripts/assemble-runtime.sh" tree "$W/root" "$W/base-libs.txt"
"$SRC/scripts/assemble-runtime.sh" finish "$W/root"
tar -C "$W/root" -cf "$W/image.tar" .
rm -rf "$W/root"
IMAGE=localhost/deltatune-image-test:$TAG
IMAGES+=("$IMAGE")
"${PODMAN[@]}" import -q --change "USER 10001:10001" --change 'ENTRYPOINT ["/usr/local/bin/deltatuned"]' \
  --change 'CMD ["--config", "/etc/deltatune/daemon.yaml"]' "$W/image.tar" "$IMAGE" >/dev/null
echo "image $IMAGE: $(($(stat -c %s "$W/image.tar") >> 20)) MiB"
rm "$W/image.tar"

# 2. The image's own default config is one deltatuned accepts (with a token file present).
echo test-token >"$W/tokens"
"${PODMAN[@]}" run --rm "${RUN_FLAGS[@]}" -v "$W/tokens:/etc/deltatune/auth/tokens:ro" "$IMAGE" \
  --config /etc/deltatune/daemon.yaml --check

# 3. The daemon in the image, on loopback ports of this machine, the demo on a volume.
demo_volume "$W/volume" 10001:10001
PORT=$(free_port)
HTTP_PORT=$(free_port)
cat >"$W/daemon.yaml" <<YAML
listen:
  grpc: 127.0.0.1:$PORT
  http: 127.0.0.1:$HTTP_PORT
state_dir: /var/lib/deltatune/state
roots:
  models: [/var/lib/deltatune/models]
  data: [/var/lib/deltatune/data]
  outputs: [/var/lib/deltatune/outputs]
YAML
CONTAINER=$("${PODMAN[@]}" run -d "${RUN_FLAGS[@]}" -v "$W/daemon.yaml:/etc/deltatune/daemon.yaml:ro" \
  -v "$W/volume:/var/lib/deltatune" "$IMAGE")
CONTAINERS+=("$CONTAINER")
export DELTATUNE_ADDRESS=127.0.0.1:$PORT
wait_serving "$CONTAINER"
demo_job "$CONTAINER" "$W/volume" 10001
echo "PASS: the image ran the demo job as uid 10001"
