#!/usr/bin/env bash
# Installs the build's dependencies (idempotent), configures and builds everything, CUDA included
# when nvcc is found, into build/ (override with BUILD_DIR). Jobs default to the number of cores.
# Nothing GPU-specific is fetched where there is no nvcc.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
./scripts/install-deps.sh
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  ./scripts/fetch-cudnn-frontend.sh
fi
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
