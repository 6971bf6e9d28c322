#!/usr/bin/env python3
"""GPU-contract comparison of a `deltatune step` output with a reference:
loss relative error (< 1e-2) and per-tensor gradient cosine similarity (> 0.99).

  compare_step_cosine.py REF_DIR STEP_JSON GRADS_SAFETENSORS
REF_DIR holds expected.json and grads.safetensors (the parity fixtures). Exits 1 on a violation.
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file


def main(ref_dir, step_json, grads):
    exp = json.load(open(f"{ref_dir}/expected.json"))
    ours = json.loads(open(step_json).read().strip().splitlines()[-1])
    g_ref, g = load_file(f"{ref_dir}/grads.safetensors"), load_file(grads)
    assert set(g_ref) == set(g), set(g_ref) ^ set(g)
    loss_rel = abs(ours["loss"] - exp["loss"]) / abs(exp["loss"])
    worst, worst_name = 2.0, ""
    cosines = []
    for name in sorted(g_ref):
        a, b = g[name].astype(np.float64).ravel(), g_ref[name].astype(np.float64).ravel()
        den = np.linalg.norm(a) * np.linalg.norm(b)
        cos = float(a @ b / den) if den > 0 else (1.0 if not a.any() and not b.any() else 0.0)
        if not np.isfinite(a).all():
            cos = -2.0
        cosines.append((cos, name, float(np.linalg.norm(b))))
        if cos < worst:
            worst, worst_name = cos, name
    ok = loss_rel < 1e-2 and worst > 0.99
    print(f"{ref_dir}: loss {ours['loss']:.6f} vs {exp['loss']:.6f} rel {loss_rel:.2e}; "
          f"min grad cosine {worst:.6f} ({worst_name}); step {ours.get('seconds', 0):.3f} s; "
          f"{'ok' if ok else 'FAIL'}")
    for cos, name, norm in sorted(cosines)[:int(os.environ.get("SHOW_WORST", "0"))]:
        print(f"    {cos:.6f}  {name}  (|ref grad| {norm:.3e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
