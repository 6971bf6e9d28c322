#!/usr/bin/env python3
"""Writes the demo job's chat dataset: short arithmetic questions and answers that a tiny model
can learn in a few dozen steps (ultrachat-style JSONL: {"messages": [...]}, one per line).

  python3 scripts/make_demo_dataset.py --out /tmp/demo/train.jsonl --count 2000 --seed 0
"""
import argparse
import json
import os
import random


def example(rng):
    a, b = rng.randrange(0, 50), rng.randrange(0, 50)
    op = rng.choice(["+", "-"])
    answer = a + b if op == "+" else a - b
    return {"messages": [{"role": "user", "content": f"What is {a} {op} {b}?"},
                         {"role": "assistant", "content": f"{a} {op} {b} = {answer}"}]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        for _ in range(args.count):
            f.write(json.dumps(example(rng)) + "\n")


if __name__ == "__main__":
    main()
