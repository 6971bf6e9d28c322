#!/usr/bin/env bash
# Did a change touch the kernels' machine code? Compiles each .cu file (default: those whose
# translation unit changed since REV) at REV and in the working tree to sm_90a cubins and compares
# their code (every .text section, sorted). A file moved or renamed since REV is compiled from its
# path at REV on that side (renames as `git diff -M` finds them, untracked files included).
# Symbol names may differ (nvcc names anonymous namespaces from the file's text), the code not;
# a renamed file can still differ by the rename alone: ptxas's output varies with the length of
# those names (the basename's length), so compare a candidate name before settling on it.
#   scripts/ci/kernel_code_diff.sh REV [kernels/family/x.cu ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:?usage: scripts/ci/kernel_code_diff.sh REV [kernels/family/x.cu ...]}; shift
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
work=$(mktemp -d /tmp/kcd-XXXXXX)
trap 'rm -rf "$work"' EXIT
# REV against the working tree, through a scratch index (the shared one is left alone).
GIT_INDEX_FILE=$work/index git read-tree "$rev"
GIT_INDEX_FILE=$work/index git add -- kernels
GIT_INDEX_FILE=$work/index git diff --cached -M --name-status "$rev" -- kernels >"$work/changes"
declare -A old_path  # working-tree path -> its path at REV
while IFS=$'\t' read -r status a b; do
  if [[ $status == R* ]]; then old_path[$b]=$a; fi
done <"$work/changes"
files=("$@")
if ((${#files[@]} == 0)); then  # every .cu that is, or includes, a changed kernels/ file
  changed=$(awk -F'\t' '{print $NF}' "$work/changes")
  while IFS= read -r f; do
    for c in $changed; do
      if [[ $f == "$c" ]] || grep -q "^#include \"$c\"" "$f"; then files+=("$f"); break; fi
    done
  done < <(find kernels -name '*.cu' | sort)
fi
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
  was=${old_path[$f]:-$f}
  if [[ ! -f $work/aaaa/$was ]]; then echo "new     $f (not at $rev)"; continue; fi
  cubin=$(echo "$f" | tr / _).cubin
  (cd "$work/aaaa" && "$NVCC" "${flags[@]}" -I. -o "$cubin" "$was") & before=$!
  (cd "$work/bbbb" && "$NVCC" "${flags[@]}" -I. -o "$cubin" "$f") & after=$!
  wait "$before"; wait "$after"
  a=$(code_hash "$work/aaaa/$cubin"); b=$(code_hash "$work/bbbb/$cubin")
  label=$f; [[ $was != "$f" ]] && label="$f (at $rev: $was)"
  if [[ $a == "$b" ]]; then echo "same    $label: $a | $b"; else echo "CHANGED $label: $a -> $b"; bad=1; fi
done
exit $bad
