#!/usr/bin/env bash
# The portable build (DELTATUNE_CUDA_TARGETS=portable: compute_80 PTX only, no SASS), bundled for
# the GPU machine, where the driver compiles it for the Hopper GPU: what an A100 or a Blackwell
# GPU runs, tested on the GPU at hand (gpu_portable.sh). Builds in PORTABLE_BUILD_DIR (default
# build-portable), bundles its tests and CLI into PORTABLE_DIR (default .device-build-portable)
# and puts its CLI beside the main bundle's as daemon/deltatune_v_portable for the step A/B.
# Run after gpu_bundle.sh, which empties the main bundle:
#   scripts/gpu/gpu_bundle.sh && scripts/gpu/build_portable.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${PORTABLE_BUILD_DIR:-build-portable}
out=${PORTABLE_DIR:-.device-build-portable}
main=${BUNDLE_DIR:-.device-build}
[[ -x $main/daemon/deltatune ]] || { echo "no bundle at $main: run scripts/gpu/gpu_bundle.sh first" >&2; exit 1; }
if [[ ! -f $build/build.ninja ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDELTATUNE_CUDA_TARGETS=portable
fi
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target kernels_tests runtime_tests deltatune
BUILD_DIR=$build BUNDLE_DIR=$out BUNDLE_TESTS="kernels_tests runtime_tests" BUNDLE_DAEMON=1 \
  scripts/gpu/gpu_bundle.sh
cp "$main/daemon/deltatune" "$main/daemon/deltatune_v_sm90a"
cp "$out/daemon/deltatune" "$main/daemon/deltatune_v_portable"
rm -rf "$out/lib"  # the same libraries as the main bundle's: gpu_portable.sh uses those
du -shL "$out" "$main"
