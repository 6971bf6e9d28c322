#!/usr/bin/env python3
"""An export loads in transformers with nothing missing (needs torch: the GPU machine's python3).

For a text-only Qwen3.5 (Qwen3_5ForCausalLM, untied, bf16) and a multimodal one
(Qwen3_5ForConditionalGeneration with a vision tower, tied, fp32), both random and tiny: saves the
base with transformers' save_pretrained, trains it 3 steps with `deltatune train` (CPU ranks, no
daemon), then loads the export with AutoModelForCausalLM / AutoModelForImageTextToText and
output_loading_info. Checks: no missing, unexpected or mismatched tensors; the vision tower equal
to the base's bit for bit; the trained weights changed and finite; the export's logits finite.
tests/e2e/export_test.py checks the tokenizer side and the file's tensors in CI (no torch there).

LoRA (with peft and accelerate on PYTHONPATH): a LoRA job on the text model exports a PEFT
folder; peft.PeftModel.from_pretrained(base, export) gives the loss `deltatune step --adapter`
gives on a batch of documents (each run alone, eager attention), to 1e-5.

  python3 scripts/gpu/gpu_export_check.py --cli .device-build/daemon/deltatune --out /tmp/export-check
"""
import argparse
import json
import os
import random
import subprocess
import sys

import torch
import transformers

TEXT = dict(vocab_size=640, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25})
VISION = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "patch_size": 2,
          "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
          "num_position_embeddings": 16}


def build(kind):
    if kind == "text":
        return (transformers.Qwen3_5ForCausalLM, transformers.AutoModelForCausalLM,
                transformers.Qwen3_5TextConfig(**TEXT), torch.bfloat16)
    text = dict(TEXT, tie_word_embeddings=True)
    config = transformers.Qwen3_5Config(text_config=text, vision_config=VISION, tie_word_embeddings=True)
    return (transformers.Qwen3_5ForConditionalGeneration, transformers.AutoModelForImageTextToText,
            config, torch.float32)


def train(cli, root, base, vocab, extra=""):
    data = os.path.join(root, "train.jsonl")
    rng = random.Random(5)
    with open(data, "w") as f:
        for _ in range(64):
            ids = [rng.randrange(vocab) for _ in range(rng.randint(8, 60))]
            f.write(json.dumps({"input_ids": ids, "labels": ids}) + "\n")
    job = os.path.join(root, "job.yaml")
    with open(job, "w") as f:
        f.write(f"model: {base}\noutput_dir: {os.path.join(root, 'out')}\n"
                f"data:\n  train_files: [{data}]\n  format: tokenized\n"
                "hyperparameters:\n  learning_rate: 0.01\n  lr_schedule: constant\n"
                "  max_steps: 3\n  tokens_per_batch: 256\nseed: 1\n" + extra)
    r = subprocess.run([cli, "train", job], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"deltatune train failed ({r.returncode}): {r.stderr[-2000:]}")
    return os.path.join(root, "out", "export")


def check(kind, cli, out_root):
    root = os.path.join(out_root, kind)
    os.makedirs(root, exist_ok=True)
    torch.manual_seed(11)
    cls, auto, config, dtype = build(kind)
    base = os.path.join(root, "base")
    cls(config).to(dtype).save_pretrained(base)
    vocab = config.text_config.vocab_size if kind != "text" else config.vocab_size
    export = train(cli, root, base, vocab)
    before = cls.from_pretrained(base, dtype=torch.float32)
    after, info = auto.from_pretrained(export, dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    ok = not problems
    b, a = dict(before.named_parameters()), dict(after.named_parameters())
    ok &= sorted(b) == sorted(a)
    visual = [n for n in b if ".visual." in n or n.startswith("visual.")]
    ok &= all(torch.equal(b[n], a[n]) for n in visual)
    trained = [n for n in b if n not in visual]
    changed = sum(not torch.equal(b[n], a[n]) for n in trained)
    ok &= changed > 0 and all(torch.isfinite(a[n]).all() for n in trained)
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.no_grad():
        logits = after(input_ids=ids).logits
    ok &= bool(torch.isfinite(logits).all())
    print(f"{kind:<11} {auto.__name__}: loading info {problems or 'clean'}; {len(a)} tensors, "
          f"{len(visual)} vision tensors equal to the base's, {changed}/{len(trained)} trained changed, "
          f"logits finite: {bool(torch.isfinite(logits).all())} -> {'PASS' if ok else 'FAIL'}")
    return ok


def check_lora(cli, out_root):
    import peft
    root = os.path.join(out_root, "lora")
    os.makedirs(root, exist_ok=True)
    torch.manual_seed(12)
    cls, _, config, dtype = build("text")
    base = os.path.join(root, "base")
    cls(config).to(dtype).save_pretrained(base)
    export = train(cli, root, base, config.vocab_size, "adapter: {type: lora, rank: 4, alpha: 8}\n")
    rng = random.Random(8)
    docs = [[rng.randrange(config.vocab_size) for _ in range(n)] for n in (17, 40, 5)]
    batch = os.path.join(root, "batch.json")
    json.dump({"documents": [{"input_ids": d, "labels": d} for d in docs]}, open(batch, "w"))
    r = subprocess.run([cli, "step", "--model", base, "--batch", batch, "--adapter", export],
                       capture_output=True, text=True, check=True)
    ours = json.loads(r.stdout)["loss"]
    model = cls.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    model = peft.PeftModel.from_pretrained(model, export).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for d in docs:
            ids = torch.tensor([d])
            logits = model(input_ids=ids).logits[0].float()
            labels = torch.tensor(d[1:] + [-100])
            total += torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum").item()
            count += len(d) - 1
    theirs = total / count
    rel = abs(ours - theirs) / abs(theirs)
    ok = rel < 1e-5
    print(f"lora        PeftModel.from_pretrained: loss {theirs:.8f}, deltatune step --adapter "
          f"{ours:.8f}, rel diff {rel:.2e} -> {'PASS' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True, help="the deltatune binary")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    results = [check(kind, args.cli, args.out) for kind in ("text", "multimodal")]
    results.append(check_lora(args.cli, args.out))
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
