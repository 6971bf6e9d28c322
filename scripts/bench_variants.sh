#!/usr/bin/env bash
# Usage: scripts/bench_variants.sh REF...   (after scripts/gpu_bundle.sh, which empties bin/)
# Builds kernels_bench at each git REF in $BUILD_DIR (checking each out in turn; only what the
# ref changes is rebuilt) and copies it, stripped, to $BUNDLE_DIR/bin/kernels_bench_v_<ref>
# (`/` in a ref becomes `_`), for scripts/gpu_attention.sh to alternate with the bundled build:
# one device run compares several prepared branches. Ends back on the branch it started from,
# with $BUILD_DIR rebuilt there. Needs a clean working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${BUNDLE_DIR:-.device-build}
(( $# )) || { echo "usage: $0 REF..." >&2; exit 2; }
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "bench_variants: the working tree has uncommitted changes; commit or stash them" >&2
  exit 1
fi
start=$(git symbolic-ref --quiet --short HEAD || git rev-parse HEAD)
trap 'git checkout -q "$start"' EXIT
mkdir -p "$OUT/bin"
for ref in "$@"; do
  git rev-parse --verify --quiet "$ref^{commit}" >/dev/null || { echo "no such ref: $ref" >&2; exit 1; }
  git checkout -q "$ref"
  cmake --build "$BUILD_DIR" --target kernels_bench >/dev/null
  strip --strip-all -o "$OUT/bin/kernels_bench_v_${ref//\//_}" "$BUILD_DIR/tests/kernels_bench"
  echo "$OUT/bin/kernels_bench_v_${ref//\//_}: $(git log --oneline -1 | cut -c1-72)"
done
git checkout -q "$start"
trap - EXIT
cmake --build "$BUILD_DIR" --target kernels_bench >/dev/null
