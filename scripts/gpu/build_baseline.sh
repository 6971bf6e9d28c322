#!/usr/bin/env bash
# The baseline binaries an alternating A/B device run compares against: COMMIT built in a second
# clone (BASE_DIR, kept between calls so that later baselines build incrementally), its
# kernels_bench and deltatune stripped into the bundle as bin/kernels_bench_base and
# daemon/deltatune_base (gpu_kernel_ab.sh's A_BIN, gpu_step_ab.sh's B_BIN). Run it after
# gpu_bundle.sh, which empties the bundle:
#   BUNDLE_TESTS="kernels_tests runtime_tests kernels_bench" scripts/gpu/gpu_bundle.sh
#   scripts/gpu/build_baseline.sh bd39b72
set -euo pipefail
cd "$(dirname "$0")/../.."
commit=${1:?usage: scripts/gpu/build_baseline.sh COMMIT}
base=${BASE_DIR:-/tmp/deltatune-base}
out=${BUNDLE_DIR:-.device-build}
[[ -d $out/bin ]] || { echo "no bundle at $out: run scripts/gpu/gpu_bundle.sh first" >&2; exit 1; }
sha=$(git rev-parse --verify -q "$commit^{commit}") || { echo "unknown commit: $commit" >&2; exit 1; }
[[ -d $base/.git ]] || git clone -q "$PWD" "$base"
git -C "$base" fetch -q "$PWD" "$sha"
git -C "$base" checkout -q --force --detach "$sha"
if [[ ! -f $base/build/build.ninja ]]; then
  (cd "$base" && ./scripts/install-deps.sh && ./scripts/python-env.sh &&
   ./scripts/fetch-cudnn-frontend.sh)
  cmake -S "$base" -B "$base/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
fi
cmake --build "$base/build" -j "${JOBS:-$(nproc)}" --target kernels_bench deltatune
strip --strip-all -o "$out/bin/kernels_bench_base" "$base/build/tests/kernels_bench"
mkdir -p "$out/daemon"
strip --strip-all -o "$out/daemon/deltatune_base" "$base/build/daemon/deltatune"
echo "baseline $(git -C "$base" rev-parse --short HEAD) in $out (bin/kernels_bench_base, daemon/deltatune_base)"
