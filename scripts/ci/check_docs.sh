#!/usr/bin/env bash
# Documentation guard: the repository stands on its own (no tracked file cites a document outside
# it: the shared folder beside a checkout, or its style and benchmark notes), and README.md stays
# a user's page (under 16 KB; figures and experiments belong in docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
bad=0
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files)
else
  mapfile -t files < <(find . -type f -not -path './build*' -not -path './.git/*')
fi
pattern='\.\./shared/|shared/(bench|docs)/|style\.md|benchmark\.md'
for f in "${files[@]}"; do
  [[ $f == scripts/ci/check_docs.sh || ! -f $f ]] && continue
  if hits=$(grep -nE "$pattern" "$f"); then
    while IFS= read -r h; do echo "ERROR: $f:$h: cites a document outside the repository"; done <<< "$hits"
    bad=1
  fi
done
size=$(wc -c < README.md)
if (( size > 16384 )); then
  echo "ERROR: README.md is $size bytes (limit 16384): move figures and experiments to docs/"
  bad=1
fi
echo "README.md: $size bytes"
exit $bad
