#!/usr/bin/env python3
"""Loads a deltatune-exported Hugging Face checkpoint in transformers and recomputes the eval loss
the daemon reported, document by document (no packing on this side), in fp32.

  python3 scripts/gpu/check_export_transformers.py --model EXPORT_DIR --data EVAL_TOKENIZED.jsonl \
      --expect-loss X [--tolerance 1e-4]

EVAL_TOKENIZED.jsonl: {"input_ids": [...], "labels": [...]} lines (`deltatune tokenize --chat`
output of the job's eval file). The loss is the token-weighted mean cross-entropy over every
label != -100, with labels shifted inside each document, as deltatune's eval computes it.
Prints one JSON line; exits 1 when |loss - expected| / expected > tolerance.
"""
import argparse
import json
import sys

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--expect-loss", type=float, required=True)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 (conv1d too)
    torch.backends.cudnn.allow_tf32 = False
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.to(device).eval()
    total, count, docs = 0.0, 0, 0
    with torch.no_grad():
        for line in open(args.data):
            if not line.strip():
                continue
            d = json.loads(line)
            ids = torch.tensor([d["input_ids"]], device=device)
            labels = torch.tensor(d.get("labels", d["input_ids"]), device=device)
            logits = model(input_ids=ids).logits[0].float()
            target = labels[1:]
            mask = target != -100
            if mask.any():
                ce = torch.nn.functional.cross_entropy(logits[:-1][mask], target[mask],
                                                       reduction="sum")
                total += ce.item()
                count += int(mask.sum())
            docs += 1
    loss = total / count
    rel = abs(loss - args.expect_loss) / abs(args.expect_loss)
    print(json.dumps({"transformers": transformers.__version__, "model_class":
                      type(model).__name__, "documents": docs, "label_tokens": count,
                      "loss": loss, "deltatune_eval_loss": args.expect_loss, "rel_err": rel}))
    sys.exit(0 if rel <= args.tolerance else 1)


if __name__ == "__main__":
    main()
