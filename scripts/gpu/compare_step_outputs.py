#!/usr/bin/env python3
"""Compares `deltatune step` outputs with reference outputs (loss, gradients, AdamW update).

  compare_step_outputs.py REF_DIR OURS_DIR
REF_DIR holds expected.json, grads.safetensors, update.safetensors; OURS_DIR holds step.json (the
line `deltatune step` printed), grads.safetensors and update.safetensors. Prints the worst relative
errors (update both over all elements and leaving out sign-ambiguous ones, see parity_test.cc).
"""
import json
import sys

import numpy as np
from safetensors.numpy import load_file


def rel(a, b, skip=None):
    d = a.astype(np.float64) - b
    if skip is not None:
        d[skip] = 0
    den = np.linalg.norm(b)
    return np.linalg.norm(d) / den if den > 0 else np.linalg.norm(d)


def main(ref_dir, ours_dir):
    exp = json.load(open(f"{ref_dir}/expected.json"))
    ours = json.load(open(f"{ours_dir}/step.json"))
    g_ref, g = load_file(f"{ref_dir}/grads.safetensors"), load_file(f"{ours_dir}/grads.safetensors")
    u_ref, u = load_file(f"{ref_dir}/update.safetensors"), load_file(f"{ours_dir}/update.safetensors")
    assert set(g_ref) == set(g), set(g_ref) ^ set(g)
    assert set(u_ref) == set(u), set(u_ref) ^ set(u)
    loss_err = abs(ours["loss"] - exp["loss"]) / abs(exp["loss"])
    grad_err = max((rel(g[k], g_ref[k]), k) for k in g_ref)
    upd_all = max((rel(u[k], u_ref[k]), k) for k in u_ref)
    upd_clear, ambiguous = 0.0, 0
    for k in u_ref:
        gr = g_ref["grad." + k]
        skip = (gr != 0) & (np.abs(gr) < 1e-5 * np.abs(gr).max())
        ambiguous += int(skip.sum())
        upd_clear = max(upd_clear, rel(u[k], u_ref[k], skip))
    print(json.dumps({"loss_rel_err": loss_err, "label_tokens_equal": ours["label_tokens"] == exp["label_tokens"],
                      "worst_grad_rel_err": grad_err[0], "worst_grad_tensor": grad_err[1],
                      "worst_update_rel_err_all": upd_all[0], "worst_update_tensor": upd_all[1],
                      "worst_update_rel_err_unambiguous": upd_clear, "sign_ambiguous_elements": ambiguous}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
