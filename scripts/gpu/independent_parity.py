#!/usr/bin/env python3
"""Acceptance check on checkpoints that are not in the repository.

Builds two random Qwen3.5 models whose shapes differ from the committed fixtures, saves them with
transformers' own save_pretrained (bf16 text layout; fp32 multimodal layout), loads them back with
from_pretrained in fp32 and writes the reference loss, gradients and AdamW update (torch defaults)
for a random packed batch, exactly as make_parity_fixtures.py computes them. Then compare with
`deltatune step` using scripts/gpu/compare_step_outputs.py.

  python3 scripts/gpu/independent_parity.py --out /tmp/independent
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import make_parity_fixtures as fixtures  # noqa: E402  (blocks FLA / causal-conv1d imports)

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

TEXT = dict(vocab_size=1000, hidden_size=96, intermediate_size=160, num_hidden_layers=4,
            layer_types=["full_attention", "linear_attention", "full_attention", "linear_attention"],
            num_attention_heads=8, num_key_value_heads=2, head_dim=64, linear_num_key_heads=4,
            linear_num_value_heads=8, linear_key_head_dim=32, linear_value_head_dim=24,
            linear_conv_kernel_dim=4, rms_norm_eps=1e-6, initializer_range=0.04, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.25})


def build(kind):
    if kind == "text-bf16":
        config = transformers.Qwen3_5TextConfig(**TEXT)
        return transformers.Qwen3_5ForCausalLM, config, torch.bfloat16
    text = dict(TEXT, vocab_size=700, hidden_size=64, num_hidden_layers=3, tie_word_embeddings=True,
                layer_types=["linear_attention", "linear_attention", "full_attention"])
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "patch_size": 2,
              "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
              "num_position_embeddings": 16}
    config = transformers.Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)
    return transformers.Qwen3_5ForConditionalGeneration, config, torch.float32


def run(kind, out_root, seed):
    out = os.path.join(out_root, kind)
    torch.manual_seed(seed)
    cls, config, save_dtype = build(kind)
    model = cls(config)
    fixtures.perturb(model, torch.Generator().manual_seed(seed))
    model.to(save_dtype).save_pretrained(os.path.join(out, "model"))
    ref = cls.from_pretrained(os.path.join(out, "model"), dtype=torch.float32, attn_implementation="eager")
    multimodal = kind != "text-bf16"
    vocab = config.text_config.vocab_size if multimodal else config.vocab_size
    rng = random.Random(seed)
    docs = []
    for n in [rng.randrange(1, 90) for _ in range(6)] + [1]:
        ids = [rng.randrange(vocab) for _ in range(n)]
        docs.append({"input_ids": ids, "labels": [-100 if i < rng.randrange(0, n + 1) else t for i, t in enumerate(ids)]})
    batch = {"documents": docs}
    json.dump(batch, open(os.path.join(out, "batch.json"), "w"))
    loss, count = fixtures.loss_and_grads(ref, batch, multimodal)
    params = [(n, p) for n, p in ref.named_parameters() if not n.startswith("model.visual.")]
    save_file({f"grad.{n}": p.grad.float().contiguous() for n, p in params}, os.path.join(out, "grads.safetensors"))
    torch.optim.AdamW([p for _, p in params], foreach=False).step()  # torch defaults
    save_file({n: p.detach().float().contiguous() for n, p in params}, os.path.join(out, "update.safetensors"))
    json.dump({"loss": loss.item(), "label_tokens": count}, open(os.path.join(out, "expected.json"), "w"))
    print(f"{kind}: loss {loss.item():.8f} over {count} label tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=777)
    args = ap.parse_args()
    for kind in ("text-bf16", "multimodal-f32"):
        run(kind, args.out, args.seed)


if __name__ == "__main__":
    main()
