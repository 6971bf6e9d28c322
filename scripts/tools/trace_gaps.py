#!/usr/bin/env python3
"""Where the GPU idles in a traced step: the gaps between its activities, largest first.

Reads the Chrome trace `deltatune bench --trace-out FILE` writes (or `deltatune profile`'s) and
prints the GPU's idle time in total, by size of gap, and the largest gaps with the GPU activity
on either side and the host CUDA calls that were running during each (what the GPU waited for).

  python3 scripts/tools/trace_gaps.py TRACE.json [--top 15] [--min-us 5]
"""
import argparse
import json
import sys


def gpu_and_host(events):
    """GPU activities and host runtime calls as (start, end, name) in us, sorted by start."""
    pids = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pids[e["pid"]] = e["args"]["name"]
    gpu, host = [], []
    for e in events:
        if e.get("ph") != "X":
            continue
        span = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e.get("name", "?"))
        (host if pids.get(e["pid"], "").endswith(" host") else gpu).append(span)
    return sorted(gpu), sorted(host)


def gaps(gpu):
    """(start, end, activity before, activity after) of every span no GPU activity covers."""
    out, end, last = [], None, None
    for s, e, name in gpu:
        if end is not None and s > end:
            out.append((end, s, last, name))
        if end is None or e > end:
            end, last = e, name
    return out


def overlapping(host, start, end, limit=3):
    """Names of the host calls that overlap [start, end), longest overlap first."""
    hits = [(min(e, end) - max(s, start), name) for s, e, name in host if s < end and e > start]
    return [f"{name} ({ov:.0f} us)" for ov, name in sorted(hits, reverse=True)[:limit]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15, help="largest gaps to list")
    ap.add_argument("--min-us", type=float, default=5.0, help="gaps shorter than this are launch"
                    " latency: counted, not listed")
    a = ap.parse_args()
    with open(a.trace) as f:
        events = json.load(f).get("traceEvents", [])
    gpu, host = gpu_and_host(events)
    if not gpu:
        sys.exit(f"{a.trace}: no GPU activity (was the step traced on a GPU?)")
    span = max(e for _, e, _ in gpu) - gpu[0][0]
    all_gaps = gaps(gpu)
    idle = sum(e - s for s, e, _, _ in all_gaps)
    print(f"GPU span {span / 1e3:.2f} ms, idle {idle / 1e3:.2f} ms in {len(all_gaps)} gaps")
    for lo, hi in ((0, 5), (5, 50), (50, 500), (500, float("inf"))):
        sel = [e - s for s, e, _, _ in all_gaps if lo <= e - s < hi]
        print(f"  gaps of {lo:g}-{hi:g} us: {len(sel)}, {sum(sel) / 1e3:.2f} ms")
    big = sorted((g for g in all_gaps if g[1] - g[0] >= a.min_us), key=lambda g: g[0] - g[1])
    for s, e, before, after in big[:a.top]:
        calls = ", ".join(overlapping(host, s, e)) or "no host CUDA call"
        print(f"{e - s:9.1f} us at {s / 1e3:8.3f} ms  after {before[:40]}, before {after[:40]}"
              f"  | host: {calls}")


if __name__ == "__main__":
    main()
