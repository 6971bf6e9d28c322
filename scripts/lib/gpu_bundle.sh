# shellcheck shell=bash
# Sourced by the GPU-machine scripts that run a bundle's builds (from gpu_bundle.sh and
# bench_variants.sh).

# unpack_bundle B: the carried .carry/bundle.tar.xz unpacked when B holds no build yet, then any
# .xz build inside B's bin/ and daemon/ (baselines and variants) decompressed.
unpack_bundle() {
  local b=$1 f
  [[ -x $b/daemon/deltatune || ! -f .carry/bundle.tar.xz ]] || tar -xJf .carry/bundle.tar.xz
  for f in "$b"/bin/*.xz "$b"/daemon/*.xz; do
    if [[ -f $f ]]; then xz -d "$f"; fi
  done
}

# bundle_env B: the libraries the bundle's builds link (its lib/, CUDA, and torch's NCCL and cuDNN).
bundle_env() {
  local s=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
  export LD_LIBRARY_PATH=$PWD/$1/lib:/usr/local/cuda/lib64:$s/nccl/lib:$s/cudnn/lib:${LD_LIBRARY_PATH:-}
}

# keep_bench_lines: a kernels_bench run's output without Catch2's banner and blank lines.
keep_bench_lines() {
  grep -vE "^$|^[=-]+$|^Filters|^Randomness|is a Catch|^All tests|^test cases"
}
