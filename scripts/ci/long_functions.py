#!/usr/bin/env python3
"""Functions longer than N lines (default 120) in kernels/, runtime/ and daemon/, longest first.

A definition is found by its signature at column 0 and its closing brace at column 0 (clang-format
writes both so here); functions defined inside a class body are not counted.
  python3 scripts/ci/long_functions.py [N]
"""
import glob
import re
import sys

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 120
out = []
for path in sorted(glob.glob("kernels/**/*.c*", recursive=True) + glob.glob("runtime/**/*.cc", recursive=True) + glob.glob("daemon/**/*.cc", recursive=True)):
    lines = open(path, errors="replace").read().split("\n")
    start = None
    for i, l in enumerate(lines):
        if start is None and l and not l[0].isspace() and l.rstrip().endswith("{") and "(" in "".join(lines[max(0,i-3):i+1]) \
           and not re.match(r"(namespace|struct|class|enum|union|extern|template\s*<[^>]*>\s*(struct|class))\b", l) and not l.startswith("#"):
            start = i
            # find signature start (previous lines that are part of it)
            s = i
            while s > 0 and lines[s-1] and not lines[s-1][0].isspace() and not lines[s-1].rstrip().endswith((";", "}", "{")) and not lines[s-1].startswith(("//", "#")):
                s -= 1
            sig_start = s
        elif start is not None and l.startswith("}"):
            n = i - sig_start + 1
            if n > LIMIT:
                out.append((n, f"{path}:{sig_start+1}", lines[sig_start].strip()[:80]))
            start = None
for n, where, sig in sorted(out, reverse=True):
    print(f"{n:5d} {where} {sig}")
