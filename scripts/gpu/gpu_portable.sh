#!/usr/bin/env bash
# The portable code on the Hopper GPU at hand, by the driver's JIT: what an A100 or a Blackwell GPU
# runs. Every [cuda] test, `deltatune kernels` and step parity against transformers on the
# portable bundle (build_portable.sh), then alternating 27B-slice steps of the sm_90a build and
# the portable one (gpu_step_ab.sh; LAYERS, default 4, fits an 80 GB card). On the GPU machine:
#   bash scripts/gpu/gpu_portable.sh
set -uo pipefail
B=${BUNDLE_DIR:-.device-build}
P=${PORTABLE_DIR:-.device-build-portable}
# shellcheck source=scripts/lib/gpu_bundle.sh
source "$(dirname "$0")/../lib/gpu_bundle.sh"
unpack_bundle "$B"
bundle_env "$B"  # the portable bundle links the same libraries and carries none of its own
echo "== the portable build: [cuda] tests, kernel report, step parity"
BUNDLE_DIR=$P bash scripts/gpu/gpu_all.sh
echo "== 27B-slice (${LAYERS:-4} layers) step: sm_90a build against the portable build"
BINS="$B/daemon/deltatune_v_sm90a $B/daemon/deltatune_v_portable" BUNDLE_DIR=$B \
  BENCH_ARGS="--layers ${LAYERS:-4}" ROUNDS=${ROUNDS:-2} bash scripts/gpu/gpu_step_ab.sh
