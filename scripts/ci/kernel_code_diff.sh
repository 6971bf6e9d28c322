#!/usr/bin/env bash
# Did a change touch the kernels' machine code? Compiles each .cu file (default: those whose
# translation unit changed since REV) at REV and in the working tree to sm_90a cubins, in two
# folders with paths of the same length, and compares their code (every .text section, sorted).
# Symbol names may differ (nvcc names anonymous namespaces from the file's text), the code not.
#   scripts/ci/kernel_code_diff.sh REV [kernels/x.cu ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:?usage: scripts/ci/kernel_code_diff.sh REV [kernels/x.cu ...]}; shift
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
files=("$@")
if ((${#files[@]} == 0)); then  # every .cu that is, or includes, a changed kernels/ file
  changed=$(git diff --name-only "$rev" -- kernels | xargs -r -n1 basename)
  for f in kernels/*.cu; do
    for c in $changed; do
      if [[ $(basename "$f") == "$c" ]] || grep -q "\"kernels/$c\"" "$f"; then files+=("$f"); break; fi
    done
  done
fi
work=$(mktemp -d /tmp/kcd-XXXXXX)
mkdir -p "$work/aaaa" "$work/bbbb"
git archive "$rev" kernels | tar -x -C "$work/aaaa"
cp -r kernels "$work/bbbb/"
flags=(-DDELTATUNE_HAVE_CUDA=1 -DDELTATUNE_HAVE_CUDNN_ATTENTION=1 -isystem=/usr/local/cuda/include
       -O2 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++17 -cubin)
code_hash() {  # the sorted .text sections of a cubin
  python3 - "$1" <<'PY'
import hashlib, re, subprocess, sys
path = sys.argv[1]
data = open(path, "rb").read()
out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True).stdout
secs = []
for line in out.splitlines():
    m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
    if m and m.group(1).startswith(".text."):
        off, size = int(m.group(2), 16), int(m.group(3), 16)
        secs.append(data[off:off + size])
print(f"{len(secs)} kernels {sum(map(len, secs))} bytes {hashlib.sha256(b''.join(sorted(secs))).hexdigest()[:16]}")
PY
}
bad=0
for f in "${files[@]}"; do
  for side in aaaa bbbb; do
    (cd "$work/$side" && "$NVCC" "${flags[@]}" -I. -o "$(basename "$f").cubin" "$f")
  done
  a=$(code_hash "$work/aaaa/$(basename "$f").cubin"); b=$(code_hash "$work/bbbb/$(basename "$f").cubin")
  if [[ $a == "$b" ]]; then echo "same    $f: $a"; else echo "CHANGED $f: $a -> $b"; bad=1; fi
done
rm -rf "$work"
exit $bad
