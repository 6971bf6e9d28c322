#!/usr/bin/env python3
"""Generates the LoRA parity fixtures in tests/fixtures/parity/lora/<config>/ from the base
parity fixtures (tests/fixtures/parity/<config>/: checkpoint and batch.json).

Oracle: transformers' Qwen3.5 in fp32 with its torch reference kernels and eager attention (as
make_parity_fixtures.py), wrapped by peft.get_peft_model with a LoraConfig on every projection
(dropout 0, bias "none"); B is set non-zero so every adapter gradient is non-trivial. Per config:

  adapter_config.json, adapter_model.safetensors   PEFT's save_pretrained of the adapter
  expected.json                                    loss, label_tokens, AdamW hyperparameters
  grads.safetensors                                "grad.<PEFT name>" of every adapter tensor
  update.safetensors                               every adapter tensor after one AdamW step
  *_fp64.*                                         the same computed in fp64 (--fp64), the truth
                                                   both fp32 results are measured against

Run on the GPU machine (torch, transformers; peft and accelerate are pure Python: download the
wheels with `pip download --no-deps peft accelerate` and put them on PYTHONPATH):
  python3 scripts/make_lora_parity_fixtures.py --out tests/fixtures/parity/lora
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parity_fixtures as fixtures  # noqa: E402  (blocks FLA / causal-conv1d imports)

import peft  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
           "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]
SPECS = {"tiny-a": dict(r=4, lora_alpha=8), "tiny-b": dict(r=3, lora_alpha=6, use_rslora=True),
         "tiny-c": dict(r=2, lora_alpha=5)}


def as_f32(t):
    """fp32 without torch's casts, which --fp64's patch turns into fp64 (deltatune reads fp32)."""
    return torch.from_numpy(t.detach().cpu().numpy().astype("float32"))


def saved_name(name):
    """PEFT's parameter name as save_pretrained writes it: without the adapter's name."""
    return name.replace(".default", "")


def run(name, base_root, out_root, seed, fp64=False):
    base = os.path.join(base_root, name)
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    raw = json.load(open(os.path.join(base, "config.json")))
    multimodal = raw["model_type"] == "qwen3_5"
    cls = transformers.Qwen3_5ForConditionalGeneration if multimodal else transformers.Qwen3_5ForCausalLM
    model = cls.from_pretrained(base, dtype=torch.float32, attn_implementation="eager").eval()
    config = peft.LoraConfig(target_modules=TARGETS, lora_dropout=0.0, bias="none", **SPECS[name])
    torch.manual_seed(seed)
    model = peft.get_peft_model(model, config)
    with torch.no_grad():  # B non-zero: every gradient of A is non-trivial too
        gen = torch.Generator().manual_seed(seed + 1)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
    suffix = "_fp64" if fp64 else ""
    if fp64:
        model = model.double()
    else:
        model.save_pretrained(out, safe_serialization=True)
    batch = json.load(open(os.path.join(base, "batch.json")))
    loss, count = fixtures.loss_and_grads(model, batch, multimodal)
    adapters = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    save_file({f"grad.{saved_name(n)}": as_f32(p.grad) for n, p in adapters},
              os.path.join(out, f"grads{suffix}.safetensors"))
    opt = torch.optim.AdamW([p for _, p in adapters], lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                            eps=HYPER["eps"], weight_decay=HYPER["weight_decay"], foreach=False)
    opt.step()
    save_file({saved_name(n): as_f32(p) for n, p in adapters},
              os.path.join(out, f"update{suffix}.safetensors"))
    expected = {"loss": loss.item(), "label_tokens": count, "adamw": HYPER, "seed": seed,
                "base": name, "torch": torch.__version__, "transformers": transformers.__version__,
                "peft": peft.__version__, "adapter_tensors": len(adapters)}
    json.dump(expected, open(os.path.join(out, f"expected{suffix}.json"), "w"), indent=2)
    print(f"lora/{name}{suffix}: loss {loss.item():.8f} over {count} label tokens, {len(adapters)} adapter tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="tests/fixtures/parity")
    ap.add_argument("--out", default="tests/fixtures/parity/lora")
    ap.add_argument("--seed", type=int, default=99)
    ap.add_argument("--fp64", action="store_true", help="also write the *_fp64 references")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    for name in sorted(SPECS):
        run(name, args.base, args.out, args.seed)
    if args.fp64:  # after the fp32 fixtures: the patch is process-wide
        fixtures.enable_fp64()
        for name in sorted(SPECS):
            run(name, args.base, args.out, args.seed, fp64=True)


if __name__ == "__main__":
    main()
