#!/usr/bin/env bash
# Usage: scripts/gpu/bench_variants.sh REF...   (after scripts/gpu/gpu_bundle.sh, which empties bin/)
# Builds each of $VARIANT_TARGETS (default kernels_bench; also kernels_tests, deltatune) at each
# git REF in $BUILD_DIR (checking each out in turn; only what the ref changes is rebuilt) and
# copies it, stripped, to $BUNDLE_DIR/bin/<target>_v_<ref> (daemon/ for deltatune; `/` in a ref
# becomes `_`), for scripts/gpu/gpu_variants_check.sh (or gpu_attention.sh) to alternate: one device
# run compares several prepared branches. Ends back on the branch it started from, with
# $BUILD_DIR rebuilt there. Needs a clean working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${BUNDLE_DIR:-.device-build}
(( $# )) || { echo "usage: $0 REF..." >&2; exit 2; }
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "bench_variants: the working tree has uncommitted changes; commit or stash them" >&2
  exit 1
fi
start=$(git symbolic-ref --quiet --short HEAD || git rev-parse HEAD)
trap 'git checkout -q "$start"' EXIT
TARGETS=${VARIANT_TARGETS:-kernels_bench}
mkdir -p "$OUT/bin" "$OUT/daemon"
built() {  # TARGET: where the build puts it, and where the bundle keeps it
  case $1 in
    deltatune) echo "$BUILD_DIR/daemon/deltatune $OUT/daemon" ;;
    *) echo "$BUILD_DIR/tests/$1 $OUT/bin" ;;
  esac
}
for ref in "$@"; do
  git rev-parse --verify --quiet "$ref^{commit}" >/dev/null || { echo "no such ref: $ref" >&2; exit 1; }
  git checkout -q "$ref"
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" --target $TARGETS >/dev/null
  for t in $TARGETS; do
    read -r from dir <<< "$(built "$t")"
    strip --strip-all -o "$dir/${t}_v_${ref//\//_}" "$from"
    echo "$dir/${t}_v_${ref//\//_}: $(git log --oneline -1 | cut -c1-72)"
  done
done
git checkout -q "$start"
trap - EXIT
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" --target $TARGETS >/dev/null
