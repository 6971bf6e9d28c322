#!/usr/bin/env bash
# What a set of GPU targets costs to build: compiles every kernels/**/*.cu with GENCODE (default:
# the `all` targets of the top-level CMakeLists.txt) and the build's other flags, JOBS (default 2)
# at a time, and prints the seconds taken and the objects' bytes.
#   scripts/tools/kernel_build_time.sh "-gencode=arch=compute_90a,code=sm_90a"
set -euo pipefail
cd "$(dirname "$0")/../.."
GENCODE=${1:-"-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=[sm_80,sm_100,sm_120,compute_80]"}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
out=$(mktemp -d /tmp/kbt-XXXXXX)
trap 'rm -rf "$out"' EXIT
export GENCODE NVCC out
start=$(date +%s.%N)
find kernels -name "*.cu" | xargs -P "${JOBS:-2}" -I{} bash -c \
  '"$NVCC" $GENCODE --expt-relaxed-constexpr -lineinfo -std=c++17 -O2 -g -DNDEBUG \
     -DDELTATUNE_HAVE_CUDA=1 -DDELTATUNE_HAVE_CUDNN_ATTENTION=1 -I. -c -o "$out/$(echo {} | tr / _).o" {}'
end=$(date +%s.%N)
printf '%.0f s, %s bytes of objects (%s)\n' "$(echo "$end - $start" | bc)" \
  "$(du -cb "$out"/*.o | tail -1 | cut -f1)" "$GENCODE"
