#!/usr/bin/env bash
# Runs every test: builds (scripts/build.sh), then CTest (unit, parity, isolation, CLI and guard
# tests). GPU tests skip with a printed reason where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
./scripts/install-deps.sh --tests
./scripts/build.sh
./scripts/python-env.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}"
# Artifacts worth a look after a run: the dashboard as headless Chromium rendered it (e2e.ui).
if [[ -f $BUILD_DIR/ui/job.png ]]; then
  echo "dashboard screenshot: $(cd "$BUILD_DIR" && pwd)/ui/job.png"
fi
