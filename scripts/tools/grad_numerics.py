#!/usr/bin/env python3
"""The CPU reference's gradient error against an fp64 rerun, beside transformers-fp32's own.

For each fixture (tests/fixtures/parity/tiny-* and, peft installed, lora/tiny-*):
  - transformers (+ peft) with every fp32 cast made fp64 (make_parity_fixtures.enable_fp64): g64;
  - transformers (+ peft) in fp32, its own error ||g32 - g64|| / ||g64||;
  - ours, `deltatune step --device cpu --grads-out` on the same checkpoint and batch.
Prints per parameter both relative errors and their ratio (ours / transformers'), a line per
fixture, the worst ratio, and exits non-zero when a ratio passes --limit (4 by default).

--make-stress DIR writes harder fixtures (the tiny configs with documents of up to 400 tokens,
other seeds, head dims 64) to measure with --fixtures DIR --names s-a,...; long documents give
tokens whose gradients amplify rounding through the layers, which the shipped fixtures lack.

  python3 scripts/tools/grad_numerics.py [--only gate] [--cache DIR]
  python3 scripts/tools/grad_numerics.py --make-stress /tmp/stress
  python3 scripts/tools/grad_numerics.py --fixtures /tmp/stress --names "$STRESS" --cache DIR
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
import make_parity_fixtures as fixtures  # noqa: E402  (blocks FLA / causal-conv1d imports)

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

BASES = ["tiny-a", "tiny-b", "tiny-c"]
GATE_PARTS = ("in_proj_a", "in_proj_b", "A_log", "dt_bias")
# name: (base config, document lengths, LoRA spec, seed, config overrides)
STRESS = {
    "s-a": ("tiny-a", [300, 7, 180], dict(r=4, lora_alpha=8), 4321, {}),
    "s-b": ("tiny-b", [257, 64, 129], dict(r=3, lora_alpha=6, use_rslora=True), 4321, {}),
    "s-c": ("tiny-c", [400, 33], dict(r=2, lora_alpha=5), 4321, {}),
    "s-d": ("tiny-a", [256, 100], dict(r=8, lora_alpha=16), 4321,
            dict(hidden_size=128, linear_key_head_dim=64, linear_value_head_dim=64)),
    "s-b2": ("tiny-b", [190, 3, 120], dict(r=4, lora_alpha=8), 11, {}),
    "s-b3": ("tiny-b", [64, 65, 200], dict(r=2, lora_alpha=4, use_rslora=True), 12, {}),
    "s-a2": ("tiny-a", [150, 150], dict(r=4, lora_alpha=8), 13, {}),
    "s-c2": ("tiny-c", [250, 50], dict(r=3, lora_alpha=6), 14, {}),
}


def make_stress(out):
    """The STRESS fixtures under `out` (and out/lora), as the parity fixture scripts make them."""
    import make_lora_parity_fixtures as lora_fixtures
    os.makedirs(os.path.join(out, "configs"), exist_ok=True)
    for name, (base, docs, spec, seed, overrides) in STRESS.items():
        raw = json.load(open(os.path.join(ROOT, "configs", "models", base + ".json")))
        raw.get("text_config", raw).update(overrides)
        cfg = os.path.join(out, "configs", name + ".json")
        json.dump(raw, open(cfg, "w"))
        fixtures.DOC_LENGTHS[name] = docs
        lora_fixtures.SPECS[name] = spec
        lora_seed = 77 if seed == 4321 else seed + 100
        fixtures.run(cfg, out, seed)
        lora_fixtures.run(name, out, os.path.join(out, "lora"), lora_seed)


def load_base(base_dir):
    raw = json.load(open(os.path.join(base_dir, "config.json")))
    multimodal = raw["model_type"] == "qwen3_5"
    cls = transformers.Qwen3_5ForConditionalGeneration if multimodal else transformers.Qwen3_5ForCausalLM
    model = cls.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager").eval()
    return model, multimodal


def transformers_grads(base_dir, adapter_dir, fp64):
    """{grad.<name>: fp64 gradient} of transformers (+ peft) on the fixture's batch."""
    model, multimodal = load_base(base_dir)
    if adapter_dir:
        import peft
        model = peft.PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    if fp64:
        model = model.double()
    batch = json.load(open(os.path.join(base_dir, "batch.json")))
    fixtures.loss_and_grads(model, batch, multimodal)
    out = {}
    for n, p in model.named_parameters():
        if p.grad is None or ".visual." in n or n.startswith("model.visual."):
            continue
        name = n.replace(".default", "") if adapter_dir else n
        out["grad." + name] = torch.from_numpy(p.grad.detach().cpu().numpy().astype("float64"))
    return out


def our_grads(cli, base_dir, adapter_dir):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "grads.safetensors")
        cmd = [cli, "step", "--device", "cpu", "--model", base_dir, "--batch",
               os.path.join(base_dir, "batch.json"), "--grads-out", path]
        if adapter_dir:
            cmd += ["--adapter", adapter_dir]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return {k: v.double() for k, v in load_file(path).items()}


def rel(a, ref):
    den = ref.norm().item()
    return (a - ref).norm().item() / den if den else (a - ref).norm().item()


def compare(label, g64, g32, ours, only, rows):
    for name in sorted(g64):
        if name not in ours or (only and not any(part in name for part in only)):
            continue
        e_ours, e_tf = rel(ours[name], g64[name]), rel(g32[name], g64[name])
        rows.append((label, name[len("grad."):], e_ours, e_tf, e_ours / e_tf if e_tf else float("inf")))


def report(rows, limit):
    print(f"{'fixture':<12} {'parameter':<64} {'ours':>9} {'tf-fp32':>9} {'ratio':>6}")
    for label, name, e_ours, e_tf, ratio in rows:
        print(f"{label:<12} {name:<64} {e_ours:9.2e} {e_tf:9.2e} {ratio:6.2f}")
    print("per fixture: worst error ours / transformers-fp32, worst ratio (parameter)")
    for label in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == label]
        w = max(mine, key=lambda r: r[4])
        print(f"  {label:<12} {max(r[2] for r in mine):.1e} / {max(r[3] for r in mine):.1e}, "
              f"{w[4]:.2f} ({w[1]})")
    worst = max(rows, key=lambda r: r[4])
    print(f"worst ratio: {worst[4]:.2f} ({worst[0]} {worst[1]}: ours {worst[2]:.2e}, tf-fp32 {worst[3]:.2e})")
    over = [r for r in rows if r[4] > limit]
    print(f"{len(over)} of {len(rows)} gradients over {limit}x transformers-fp32's error")
    return 1 if over else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "daemon", "deltatune"))
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures", "parity"))
    ap.add_argument("--names", default=",".join(BASES), help="comma-separated fixtures under --fixtures")
    ap.add_argument("--only", choices=["gate", "all"], default="all", help="gate: the gate path's parameters")
    ap.add_argument("--no-lora", action="store_true", help="skip the lora/<name> fixtures")
    ap.add_argument("--cache", help="keep transformers' gradients in this folder between runs")
    ap.add_argument("--limit", type=float, default=4.0, help="largest ratio ours / transformers-fp32")
    ap.add_argument("--make-stress", metavar="DIR", help="write the stress fixtures to DIR and exit")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    if args.make_stress:
        make_stress(args.make_stress)
        return 0
    names = args.names.split(",")
    cases = [(b, None) for b in names]
    if not args.no_lora:
        cases += [(b, os.path.join(args.fixtures, "lora", b)) for b in names]

    def reference(base, adapter, fp64):
        label = ("lora-" if adapter else "") + base + ("-fp64" if fp64 else "-fp32")
        path = os.path.join(args.cache, label + ".safetensors") if args.cache else None
        if path and os.path.exists(path):
            return {k: v.double() for k, v in load_file(path).items()}
        grads = transformers_grads(os.path.join(args.fixtures, base), adapter, fp64)
        if path:
            os.makedirs(args.cache, exist_ok=True)
            save_file(grads, path)
        return grads

    g32 = {case: reference(*case, False) for case in cases}
    fixtures.enable_fp64()  # after every fp32 pass: the patch is process-wide
    rows = []
    for base, adapter in cases:
        ours = our_grads(args.cli, os.path.join(args.fixtures, base), adapter)
        label = ("lora/" if adapter else "") + base
        compare(label, reference(base, adapter, True), g32[(base, adapter)], ours,
                GATE_PARTS if args.only == "gate" else None, rows)
    return report(rows, args.limit)


if __name__ == "__main__":
    sys.exit(main())
