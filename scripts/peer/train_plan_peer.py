#!/usr/bin/env python3
"""The PyTorch peer trained on deltatune's own batches, for the loss-curve comparison.

Reads a training plan (`deltatune train JOB.yaml --plan-out plan.jsonl`: per step its packed
batches with Hugging Face flattened labels and cu_seqlens) and trains the Hugging Face model in
MODEL_DIR on exactly those batches, in order, with the job's optimizer: AdamW (fused, fp32
masters: the model in fp32 under bf16 autocast), linear warmup then cosine to min_lr_ratio x
peak, clipping by global norm. Writes CSV lines step,loss,grad_norm,lr (loss: the mean over the
step's labeled tokens, as deltatune reports it; grad_norm: before clipping).

  python3 train_plan_peer.py --model MODEL_DIR --plan plan.jsonl --out peer.csv \
      --lr 1e-5 --warmup 25 --min-lr-ratio 0.1 [--fla] [--seed N]

Documents stay apart: the batch's cu_seqlens go to the attention and the GDN layers (as
bench_peer.py's --cu), position ids restart per document. --seed only seeds torch (the data and
the weights are the plan's and the folder's): two seeds measure the peer's own run-to-run spread.
"""
import argparse, csv, json, math, os, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--plan", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--lr", type=float, default=1e-5)
ap.add_argument("--warmup", type=int, default=0)
ap.add_argument("--min-lr-ratio", type=float, default=0.1)
ap.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.95])
ap.add_argument("--eps", type=float, default=1e-8)
ap.add_argument("--weight-decay", type=float, default=0.0)
ap.add_argument("--max-grad-norm", type=float, default=1.0)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--fla", action="store_true", help="put a carried ../.carry/fla package on sys.path")
args = ap.parse_args()
if args.fla:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".carry"))

import torch
import transformers

torch.manual_seed(args.seed)
dev = "cuda"
model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(dev)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=tuple(args.betas), eps=args.eps,
                        weight_decay=args.weight_decay, fused=True)


def read_steps(path):
    """Yields (step, [batch lines]) in the plan's order."""
    batches = []
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "batch_digest" in j:
                yield j["step"], batches, j["label_tokens"]
                batches = []
            else:
                batches.append(j)


steps = sum(1 for line in open(args.plan) if '"batch_digest"' in line)


def lr_at(step):  # deltatune's LrSchedule (runtime/train/lr_schedule.cc), cosine
    if args.warmup > 0 and step <= args.warmup:
        return args.lr * step / args.warmup
    progress = min(max((step - args.warmup) / max(1, steps - args.warmup), 0.0), 1.0)
    floor = args.lr * args.min_lr_ratio
    return floor + (args.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def inputs_of(b):
    ids = torch.tensor(b["input_ids"], device=dev)[None]
    labels = torch.tensor(b["labels"], device=dev)[None]
    cu = b["cu_seqlens"]
    pos = torch.cat([torch.arange(cu[i + 1] - cu[i], device=dev) for i in range(len(cu) - 1)])[None]
    cut = torch.tensor(cu, dtype=torch.int32, device=dev)
    longest = max(cu[i + 1] - cu[i] for i in range(len(cu) - 1))
    return dict(input_ids=ids, position_ids=pos, cu_seq_lens_q=cut, cu_seq_lens_k=cut,
                max_length_q=longest, max_length_k=longest), labels


with open(args.out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["step", "loss", "grad_norm", "lr"])
    t0 = time.time()
    for step, batches, label_tokens in read_steps(args.plan):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss_sum = 0.0
        for b in batches:
            kw, labels = inputs_of(b)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(**kw).logits.float()
            # Summed over the step's labeled tokens, divided once by their count: deltatune's mean.
            shift = labels[:, 1:]
            lsum = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), shift.reshape(-1),
                ignore_index=-100, reduction="sum")
            (lsum / label_tokens).backward()
            loss_sum += lsum.item()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                              args.max_grad_norm if args.max_grad_norm > 0 else 1e30)
        opt.step()
        opt.zero_grad(set_to_none=True)
        w.writerow([step, loss_sum / label_tokens, norm.item(), lr_at(step)])
        if step % 25 == 0:
            f.flush()
            print(f"step {step}: loss {loss_sum / label_tokens:.4f} ({time.time() - t0:.0f} s)",
                  flush=True)
