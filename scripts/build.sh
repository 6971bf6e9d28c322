#!/usr/bin/env bash
# Installs dependencies (idempotent), configures and builds everything, CUDA included when nvcc
# is found, into build/ (override with BUILD_DIR). Jobs default to the number of cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
./scripts/install-deps.sh
./scripts/python-env.sh        # also the pip that fetches the cudnn-frontend headers
./scripts/fetch-cudnn-frontend.sh
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
