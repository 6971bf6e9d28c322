#!/usr/bin/env bash
# CTest entry for a Python end-to-end test: runs it with $DELTATUNE_BINARY_DIR/pyenv (made by
# scripts/python-env.sh, which scripts/test.sh runs first); exits 77 (skipped) without it.
set -euo pipefail
PY=$DELTATUNE_BINARY_DIR/pyenv/bin/python
if [[ ! -x $PY ]]; then
  echo "SKIP: $PY missing (run scripts/python-env.sh)"
  exit 77
fi
exec "$PY" "$@"
