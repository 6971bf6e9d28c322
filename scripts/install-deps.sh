#!/usr/bin/env bash
# Installs the Debian packages deltatune's build needs; with --tests, also what only the tests use
# (scripts/test.sh passes it). Idempotent: packages already present are skipped, so a second run
# does no network work. CUDA, cuDNN, NCCL and CUPTI come from the CUDA toolkit under
# /usr/local/cuda (optional: without nvcc the CUDA targets are skipped).
#   scripts/install-deps.sh [--tests]
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3 python3-venv
  libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libyaml-cpp-dev nlohmann-json3-dev catch2 libsqlite3-dev libgloo-dev
  libutf8proc-dev libpcre2-dev libmicrohttpd-dev
  libcli11-dev  # command lines of deltatune and deltatuned (header-only)
  libxxhash-dev  # XXH64: data file hashes and token cache keys (runtime needs libxxhash0)
)
if [[ ${1:-} == --tests ]]; then
  PACKAGES+=(
    clang-format  # the format guard
    prometheus  # the monitoring tests: a real Prometheus scrapes a daemon; promtool checks /metrics
    chromium  # the dashboard test: headless Chromium renders /ui
    debootstrap podman runc  # the image test: a Debian root, imported and run without a registry
  )
  # kubectl renders the Kubernetes kustomize base in the deploy test; a kubectl already
  # installed (from any package) is kept.
  command -v kubectl >/dev/null || PACKAGES+=(kubernetes-client)
elif [[ -n ${1:-} ]]; then
  echo "usage: scripts/install-deps.sh [--tests]" >&2
  exit 2
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
