#!/usr/bin/env bash
# Formatting guard: every C++/CUDA source matches .clang-format.
set -euo pipefail
cd "$(dirname "$0")/../.."
find kernels runtime daemon tests \( -name '*.cc' -o -name '*.cu' -o -name '*.h' \) -print0 |
  xargs -0 clang-format --dry-run --Werror
echo "format: clean"
