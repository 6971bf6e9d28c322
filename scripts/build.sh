#!/usr/bin/env bash
# Installs the build's dependencies (idempotent), configures and builds into build/ (override with
# BUILD_DIR): everything, or only TARGETS (e.g. "deltatuned deltatune"). CUDA kernels are built
# when nvcc is found unless CMAKE_ARGS has -DDELTATUNE_CUDA=OFF; nothing GPU-specific is fetched
# for a build without them. Jobs default to the number of cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
./scripts/install-deps.sh
if [[ ${CMAKE_ARGS:-} != *DELTATUNE_CUDA=OFF* ]] &&
   { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  ./scripts/fetch-cudnn-frontend.sh
fi
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
fi
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "${targets[@]}"
