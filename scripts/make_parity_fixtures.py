#!/usr/bin/env python3
"""Generates the transformers parity fixtures in tests/fixtures/parity/<config>/.

Oracle: transformers' Qwen3.5 in fp32 on the CPU with its torch reference kernels (FLA and
causal-conv1d are blocked from import so the torch paths run) and eager attention. Each document
runs on its own, so nothing can leak between documents. For every config in configs/models/tiny-*.json:

  config.json, model*.safetensors (+ index when sharded)   the checkpoint (random init + noise)
  batch.json                                               documents with prompt labels -100
  expected.json                                            loss, label_tokens, AdamW hyperparameters
  grads.safetensors                                        fp32 "grad.<name>" of every text parameter
  update.safetensors                                       fp32 parameters after one AdamW step

Run on the GPU machine (torch 2.11, transformers 5.17):
  python3 scripts/make_parity_fixtures.py --out tests/fixtures/parity
"""
import argparse
import glob
import json
import os
import random
import sys

sys.modules["fla"] = None            # force transformers' torch reference kernels
sys.modules["causal_conv1d"] = None

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

HYPER = {"lr": 1e-5, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}
DOC_LENGTHS = {"tiny-a": [37, 1, 70, 5, 13, 3], "tiny-b": [64, 2, 29, 100], "tiny-c": [9, 66, 1, 4, 21]}
KEEP_F32 = ("linear_attn.A_log", "linear_attn.norm.weight")


def build_model(cfg_path):
    raw = json.load(open(cfg_path))
    if raw["model_type"] == "qwen3_5":
        config = transformers.Qwen3_5Config.from_dict(raw)
        cls = transformers.Qwen3_5ForConditionalGeneration
    else:
        config = transformers.Qwen3_5TextConfig.from_dict(raw)
        cls = transformers.Qwen3_5ForCausalLM
    config._attn_implementation = "eager"
    model = cls(config).float().eval()
    return raw, model


def perturb(model, gen):
    """Moves every parameter away from its structured init so each one matters in the loss."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight") or name.endswith("dt_bias"):
                p.add_(0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(0.5, 4.0, generator=gen)))
            elif p.dim() >= 2:
                p.mul_(3.0)


def enable_fp64():
    """Diagnostic oracle: every fp32 cast in the reference path computes in fp64 instead."""
    to = torch.Tensor.to

    def to64(self, *args, **kwargs):
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        if kwargs.get("dtype") is torch.float32:
            kwargs["dtype"] = torch.float64
        return to(self, *args, **kwargs)

    torch.Tensor.to = to64
    torch.Tensor.float = lambda self: self.double()


def loss_and_grads(model, batch, multimodal):
    """Sum of token cross-entropies over all documents (each run alone) / trained-token count."""
    model.zero_grad(set_to_none=True)
    total, count = 0.0, 0
    for doc in batch["documents"]:
        ids = torch.tensor([doc["input_ids"]])
        labels = torch.tensor(doc["labels"][1:] + [-100])
        kwargs = {"position_ids": torch.arange(ids.shape[1])[None]} if multimodal else {}
        logits = model(input_ids=ids, **kwargs).logits[0].float()
        total = total + F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
        count += int((labels != -100).sum())
    loss = total / count
    loss.backward()
    return loss, count


def stored(name, tensor, dtype):
    if dtype == "bfloat16" and not name.endswith(KEEP_F32):
        return tensor.to(torch.bfloat16)
    return tensor.contiguous()


def write_checkpoint(out, model, raw, dtype, tied, multimodal):
    """Safetensors in the stored dtypes; the multimodal config is sharded with an index."""
    state = {k: stored(k, v, dtype) for k, v in model.state_dict().items()}
    if tied:
        state.pop("lm_head.weight", None)
    names = sorted(state)
    if multimodal:  # sharded, with an index, as the published checkpoints are
        half = len(names) // 2
        shards = {"model-00001-of-00002.safetensors": names[:half],
                  "model-00002-of-00002.safetensors": names[half:]}
        index = {"metadata": {"total_size": sum(state[k].numel() * state[k].element_size() for k in names)},
                 "weight_map": {}}
        for fname, keys in shards.items():
            save_file({k: state[k] for k in keys}, os.path.join(out, fname), metadata={"format": "pt"})
            index["weight_map"].update({k: fname for k in keys})
        json.dump(index, open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
    else:
        save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    json.dump(raw, open(os.path.join(out, "config.json"), "w"), indent=2)


def make_batch(name, vocab, seed):
    rng = random.Random(seed)
    docs = []
    for n in DOC_LENGTHS[name]:
        ids = [rng.randrange(vocab) for _ in range(n)]
        prompt = n // 3
        labels = [-100 if i < prompt else t for i, t in enumerate(ids)]
        docs.append({"input_ids": ids, "labels": labels})
    return {"documents": docs}


def run(cfg_path, out_root, seed, fp64=False):
    name = os.path.basename(cfg_path)[: -len(".json")]
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(seed)
    raw, model = build_model(cfg_path)
    gen = torch.Generator().manual_seed(seed + 1)
    perturb(model, gen)
    multimodal = raw["model_type"] == "qwen3_5"
    text_cfg = raw["text_config"] if multimodal else raw
    tied = bool(raw.get("tie_word_embeddings", False))
    dtype = raw.get("dtype", "float32")

    # Round stored values first so the oracle computes on exactly what the checkpoint holds.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(stored(pname, p.detach(), dtype).float())
    if not fp64:  # the checkpoint is written once, by the fp32 pass
        write_checkpoint(out, model, raw, dtype, tied, multimodal)

    batch = make_batch(name, text_cfg["vocab_size"], seed)
    if not fp64:
        json.dump(batch, open(os.path.join(out, "batch.json"), "w"))

    if fp64:
        model = model.double()
    loss, count = loss_and_grads(model, batch, multimodal)
    suffix = "_fp64" if fp64 else ""

    text_params = [(n, p) for n, p in model.named_parameters() if not n.startswith("model.visual.")]
    grads = {f"grad.{n}": p.grad.detach().float().contiguous() for n, p in text_params}
    save_file(grads, os.path.join(out, f"grads{suffix}.safetensors"))

    opt = torch.optim.AdamW([p for _, p in text_params], lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                            eps=HYPER["eps"], weight_decay=HYPER["weight_decay"], foreach=False)
    opt.step()
    save_file({n: p.detach().float().contiguous() for n, p in text_params}, os.path.join(out, f"update{suffix}.safetensors"))

    if fp64:
        json.dump({"loss": loss.item(), "label_tokens": count}, open(os.path.join(out, "expected_fp64.json"), "w"))
        print(f"{name} (fp64 diagnostic): loss {loss.item():.10f}")
        return
    expected = {"loss": loss.item(), "label_tokens": count, "adamw": HYPER, "seed": seed,
                "torch": torch.__version__, "transformers": transformers.__version__,
                "class": type(model).__name__, "attn_implementation": "eager", "dtype_compute": "float32"}
    json.dump(expected, open(os.path.join(out, "expected.json"), "w"), indent=2)
    print(f"{name}: loss {loss.item():.8f} over {count} label tokens, {len(text_params)} text params")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/parity")
    ap.add_argument("--configs", default="configs/models/tiny-*.json")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--fp64", action="store_true",
                    help="diagnostic: also write *_fp64 outputs computed with every fp32 cast made fp64")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    configs = sorted(glob.glob(args.configs))
    for cfg in configs:
        run(cfg, args.out, args.seed)
    if args.fp64:  # after the fp32 fixtures: the patch is process-wide
        enable_fp64()
        for cfg in configs:
            run(cfg, args.out, args.seed, fp64=True)


if __name__ == "__main__":
    main()
