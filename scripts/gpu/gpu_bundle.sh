#!/usr/bin/env bash
# Packs what the GPU machine needs into .device-build/ (git-ignored, carried by the device tool):
# stripped test binaries plus the non-system shared libraries they link (absl, ...), because the
# GPU machine has the CUDA toolkit, NCCL and cuDNN but none of the Debian libraries.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${BUNDLE_DIR:-.device-build}  # another folder lets two bundles coexist
rm -rf "$OUT" && mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/daemon"
shopt -s nullglob  # a build dir may hold only some of the targets (e.g. just kernels_tests)
# BUNDLE_TESTS (default: every *_tests) names the test binaries to take: the device tool carries
# at most 64 MiB with the working tree.
# kernels_bench (the per-kernel benchmarks) only when BUNDLE_TESTS names it.
for t in "$BUILD_DIR"/tests/*_tests "$BUILD_DIR"/tests/kernels_bench; do
  name=$(basename "$t")
  [[ -n ${BUNDLE_TESTS:-} && " $BUNDLE_TESTS " != *" $name "* ]] && continue
  [[ $name == kernels_bench && " ${BUNDLE_TESTS:-} " != *" $name "* ]] && continue
  [[ -f $t ]] || continue  # kernels_bench exists only in CUDA builds
  strip --strip-all -o "$OUT/bin/$name" "$t"
done
for exe in deltatune deltatuned; do  # the CLI and the daemon (GPU jobs end to end)
  [[ ${BUNDLE_DAEMON:-1} == 0 ]] && continue  # tests only: leaves out gRPC and its libraries
  if [[ -f "$BUILD_DIR/daemon/$exe" ]]; then
    strip --strip-all -o "$OUT/daemon/$exe" "$BUILD_DIR/daemon/$exe"
  fi
done
for f in "$OUT"/bin/* "$OUT"/daemon/*; do
  for lib in $(ldd "$f" | awk '/=>/ {print $3}'); do
    case "$lib" in
      */libcupti.so*) cp -nL "$lib" "$OUT/lib/" ;;  # the device's CUDA image may lack CUPTI
      /usr/local/cuda*|*/libc.so*|*/libm.so*|*/libstdc++.so*|*/libgcc_s.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*) ;;
      *) cp -nL "$lib" "$OUT/lib/" ;;
    esac
  done
done
for lib in "$OUT"/lib/*; do strip --strip-unneeded "$lib" 2>/dev/null || true; done
du -sh "$OUT"
