#!/usr/bin/env bash
# The Debian package: `cpack -G DEB` builds deltatune_<version>_amd64.deb from this build; apt
# installs it into a clean Debian 12 root with systemd (a container from the cached debootstrap
# root, its Depends fetched from the mirror); systemd-analyze verifies its two units in that root; then the
# daemon starts from it as deltatuned.service would (the unit's ExecStart, as its User, the
# packaged config with this test's ports) and runs the demo job submitted from outside.
# Needs root, podman, runc and debootstrap (scripts/install-deps.sh --tests); skips without them.
set -euo pipefail
W=$(mktemp -d /tmp/deltatune-deb-XXXXXX)
source "$(dirname "$0")/container_lib.sh"

# 1. The package.
(cd "$DELTATUNE_BINARY_DIR" && cpack -G DEB -B "$W/cpack" >"$W/cpack.log" 2>&1) ||
  { tail -30 "$W/cpack.log"; fail "cpack"; }
DEB=$(ls "$W"/cpack/deltatune_*_amd64.deb)
echo "$(basename "$DEB"): $(($(stat -c %s "$DEB") >> 20)) MiB"
dpkg-deb -f "$DEB" Depends | tr ',' '\n' | sed 's/^ */  depends: /'
dpkg-deb -c "$DEB" | awk '{print $6}' | grep -E "bin/|systemd|etc/|lib/deltatune/" | sed 's/^/  /'

# 2. A clean root with systemd (as a server has) and the package, installed by apt (its archive
#    cache kept between runs).
BASE=localhost/deltatune-deb-base:$TAG
IMAGE=localhost/deltatune-deb-test:$TAG
IMAGES+=("$BASE" "$IMAGE")
"${PODMAN[@]}" import -q "$(base_tar)" "$BASE" >/dev/null
mkdir -p "$CACHE/apt-archives/partial"
INSTALL=deb-install-$TAG
CONTAINERS+=("$INSTALL")
"${PODMAN[@]}" run --name "$INSTALL" "${RUN_FLAGS[@]}" -v "$DEB:/tmp/deltatune.deb:ro" \
  -v "$CACHE/apt-archives:/var/cache/apt/archives" "$BASE" sh -c \
  'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd /tmp/deltatune.deb' \
  >"$W/apt.log" 2>&1 || { tail -30 "$W/apt.log"; fail "apt-get install of the package"; }
grep -E "^Setting up deltatune" "$W/apt.log"
"${PODMAN[@]}" commit -q "$INSTALL" "$IMAGE" >/dev/null

# 3. The units, verified against the installed root (their binaries, users and paths).
MNT=$(podman image mount "$IMAGE")
systemd-analyze verify --root="$MNT" deltatuned.service deltatune-agent@node1.service \
  >"$W/verify.log" 2>&1 || { cat "$W/verify.log"; fail "systemd-analyze verify"; }
echo "systemd-analyze verify: deltatuned.service and deltatune-agent@.service accepted"
grep -v "^$" "$W/verify.log" | sed "s/^/  verify: /" || true
UNIT=$MNT/usr/lib/systemd/system/deltatuned.service
EXEC=$(sed -n 's/^ExecStart=//p' "$UNIT")
UNIT_USER=$(sed -n 's/^User=//p' "$UNIT")
podman image unmount "$IMAGE" >/dev/null
echo "deltatuned.service: User=$UNIT_USER ExecStart=$EXEC"
UID_GID=$("${PODMAN[@]}" run --rm "${RUN_FLAGS[@]}" "$IMAGE" sh -c "echo \$(id -u $UNIT_USER):\$(id -g $UNIT_USER)")

# 4. The daemon as the unit starts it: the packaged config with this test's ports.
demo_volume "$W/volume" "$UID_GID"
PORT=$(free_port)
HTTP_PORT=$(free_port)
"${PODMAN[@]}" run --rm "${RUN_FLAGS[@]}" "$IMAGE" cat /etc/deltatune/daemon.yaml |
  sed -e "s/127.0.0.1:7070/127.0.0.1:$PORT/" -e "s/127.0.0.1:9090/127.0.0.1:$HTTP_PORT/" >"$W/daemon.yaml"
grep -q "$PORT" "$W/daemon.yaml" || fail "the packaged config does not listen on 127.0.0.1:7070"
CONTAINER=$("${PODMAN[@]}" run -d "${RUN_FLAGS[@]}" --user "$UID_GID" \
  -v "$W/daemon.yaml:/etc/deltatune/daemon.yaml:ro" -v "$W/volume:/var/lib/deltatune" \
  --entrypoint '[]' "$IMAGE" $EXEC)
CONTAINERS+=("$CONTAINER")
export DELTATUNE_ADDRESS=127.0.0.1:$PORT
wait_serving "$CONTAINER"
demo_job "$CONTAINER" "$W/volume" "${UID_GID%%:*}"
echo "PASS: the package installed by apt into a clean root ran the demo job as $UNIT_USER"
