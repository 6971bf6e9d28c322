#!/usr/bin/env python3
"""Writes the benchmark's synthetic pre-tokenized dataset (docs/performance.md): N documents
whose lengths are drawn from lognormal(mu=7.0, sigma=0.5) clipped to [16, 8192], with token ids
uniform in [0, vocab), every token trained (no "labels" field: labels default to input_ids).
Standard library only (random.Random), so the same seed gives the same file everywhere.

  python3 scripts/make_synthetic_dataset.py --out /tmp/synth.jsonl            # 20000 documents
  deltatune pack-stats --data /tmp/synth.jsonl --tokens-per-batch 8192
"""
import argparse
import json
import math
import os
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=20000, help="documents (default 20000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mu", type=float, default=7.0)
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--min-len", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=248320, help="ids are uniform in [0, vocab)")
    args = ap.parse_args()
    # Separate streams for lengths and ids, so --vocab does not change the lengths.
    lengths_rng = random.Random(args.seed)
    ids_rng = random.Random(args.seed + 1)
    lengths = [round(lengths_rng.lognormvariate(args.mu, args.sigma)) for _ in range(args.count)]
    lengths = [min(args.max_len, max(args.min_len, n)) for n in lengths]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        for n in lengths:
            ids = [ids_rng.randrange(args.vocab) for _ in range(n)]
            f.write(json.dumps({"input_ids": ids}, separators=(",", ":")) + "\n")
    os.replace(tmp, args.out)
    total = sum(lengths)
    print(json.dumps({"out": args.out, "documents": args.count, "tokens": total,
                      "mean_length": total / max(1, args.count),
                      "expected_mean": math.exp(args.mu + args.sigma ** 2 / 2)}))


if __name__ == "__main__":
    main()
