#!/usr/bin/env python3
"""Converts a dataset into the JSON Lines deltatune reads, on your side (the training process
reads no Parquet and runs no Python). Needs the Hugging Face `datasets` package.

  python3 scripts/tools/hf_to_jsonl.py train.parquet train.jsonl          # Parquet, Arrow, CSV, JSON
  python3 scripts/tools/hf_to_jsonl.py HuggingFaceH4/ultrachat_200k out.jsonl --split train_sft
  python3 scripts/tools/hf_to_jsonl.py data.parquet out.jsonl --columns messages

Every row becomes one JSON object with the row's columns (or only --columns); chat data needs a
"messages" column, pre-tokenized data "input_ids" (and optionally "labels").
"""
import argparse
import json
import os
import sys

LOCAL = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json", ".jsonl": "json"}


def load(source, split):
    import datasets  # imported here so --help works without it

    builder = LOCAL.get(os.path.splitext(source)[1].lower()) if os.path.exists(source) else None
    if builder:
        return datasets.load_dataset(builder, data_files=source, split="train")
    return datasets.load_dataset(source, split=split)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="a local .parquet/.arrow/.csv/.json file or a Hugging Face dataset name")
    ap.add_argument("out", help="the JSONL file to write ('-' for stdout)")
    ap.add_argument("--split", default="train", help="the split of a hub dataset (default: train)")
    ap.add_argument("--columns", nargs="+", help="keep only these columns")
    args = ap.parse_args()
    data = load(args.source, args.split)
    missing = [c for c in args.columns or [] if c not in data.column_names]
    if missing:
        sys.exit(f"hf_to_jsonl: no column {missing} in {args.source} (columns: {data.column_names})")
    if args.columns:
        data = data.select_columns(args.columns)
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    rows = 0
    for row in data:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        rows += 1
    if out is not sys.stdout:
        out.close()
    print(f"hf_to_jsonl: wrote {rows} rows to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
