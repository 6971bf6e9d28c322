#!/usr/bin/env python3
"""How fast is every cuDNN execution plan for deltatune's packed attention graphs?

Companion of cudnn_ragged_probe.py (same graph as kernels/attention/attention_cudnn.cc: ragged THD q/k/v,
top-left causal mask, padding mask from the document lengths, Qwen3.8-27B's 24/4 heads of 256),
run on the GPU machine with the cudnn-frontend wheel on sys.path (PYTHONPATH=.carry/cfe). For each
batch (ultrachat-like lognormal documents, 6 x 1250, 1 x 8192; 8192 tokens) it builds every plan
the heuristics offer (modes A and B) for the forward and the backward and prints each plan's
median time and TFLOP/s, marking the one HEURISTICS_CHOICE takes (index 0), so that a faster
plan, if any, can be chosen by measurement.
"""
import math
import random
import sys

import torch
import cudnn

D, HQ, HKV, TOKENS = 256, 24, 4, 8192


def ultrachat_like(seed=7):
    rng = random.Random(seed)
    lengths, left = [], TOKENS
    while left > 0:
        n = min(max(int(rng.lognormvariate(math.log(900.0), 0.8)), 16), 4096, left)
        lengths.append(n)
        left -= n
    return lengths


def median_ms(fn, reps=15):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def graphs(lengths, handle, backward, longest_first=False):
    """The graph and its variant pack. longest_first: batch slot i holds the i-th longest
    document (its ragged offsets point at it wherever it lies in the packed tensors), in case
    cuDNN's grid runs slots in order and a long document last sets the tail."""
    b = len(lengths)
    slots = 1 << (b - 1).bit_length()
    s_max = 1 << max(6, (max(lengths) - 1).bit_length())
    starts = [sum(lengths[:i]) for i in range(b)]
    order = sorted(range(b), key=lambda i: -lengths[i]) if longest_first else list(range(b))
    seq = torch.zeros(slots, dtype=torch.int32, device="cuda")
    seq[:b] = torch.tensor([lengths[i] for i in order], dtype=torch.int32)
    seq = seq.view(slots, 1, 1, 1)
    slot_start = [starts[i] for i in order] + [TOKENS] * (slots + 1 - b)
    cum = torch.tensor(slot_start, dtype=torch.int64, device="cuda").view(slots + 1, 1, 1, 1)
    offs = {n: cum * m for n, m in [("q", HQ * D), ("kv", HKV * D), ("stats", HQ)]}
    data = {n: torch.randn(TOKENS, h, D, dtype=torch.bfloat16, device="cuda")
            for n, h in [("q", HQ), ("k", HKV), ("v", HKV), ("o", HQ), ("do", HQ)]}
    stats = torch.randn(TOKENS, HQ, dtype=torch.float32, device="cuda")
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16,
                      intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    off_t = {n: g.tensor_like(x) for n, x in offs.items()}

    def ragged(t, heads, off):
        t.set_dim([slots, heads, s_max, D]).set_stride([s_max * heads * D, D, heads * D, 1])
        t.set_ragged_offset(off)
        return t

    def tensor(name, heads, off):
        return ragged(g.tensor(name=name, dim=[slots, heads, s_max, D],
                               stride=[s_max * heads * D, D, heads * D, 1],
                               data_type=cudnn.data_type.BFLOAT16), heads, off)

    q_t, k_t, v_t = tensor("q", HQ, off_t["q"]), tensor("k", HKV, off_t["kv"]), tensor("v", HKV, off_t["kv"])
    seq_q, seq_kv = g.tensor_like(seq), g.tensor_like(seq)
    common = dict(attn_scale=1.0 / 16, use_padding_mask=True, seq_len_q=seq_q, seq_len_kv=seq_kv,
                  diagonal_band_right_bound=0, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT)
    pack = {q_t: data["q"], k_t: data["k"], v_t: data["v"], seq_q: seq, seq_kv: seq}
    pack.update({off_t[n]: offs[n] for n in offs})
    if not backward:
        o_t, st_t = g.sdpa(name="fwd", q=q_t, k=k_t, v=v_t, generate_stats=True,
                           implementation=cudnn.attention_implementation.COMPOSITE, **common)
        ragged(o_t.set_output(True), HQ, off_t["q"])
        st_t.set_output(True).set_data_type(cudnn.data_type.FLOAT)
        st_t.set_dim([slots, HQ, s_max, 1]).set_stride([s_max * HQ, 1, HQ, 1]).set_ragged_offset(off_t["stats"])
        pack.update({o_t: data["o"], st_t: stats})
    else:
        o_t, do_t = tensor("o", HQ, off_t["q"]), tensor("do", HQ, off_t["q"])
        st_t = g.tensor(name="stats", dim=[slots, HQ, s_max, 1], stride=[s_max * HQ, 1, HQ, 1],
                        data_type=cudnn.data_type.FLOAT)
        st_t.set_ragged_offset(off_t["stats"])
        dq, dk, dv = g.sdpa_backward(name="bwd", q=q_t, k=k_t, v=v_t, o=o_t, dO=do_t, stats=st_t,
                                     max_total_seq_len_q=TOKENS, max_total_seq_len_kv=TOKENS,
                                     **common)
        grads = {n: torch.empty_like(data[n]) for n in "qkv"}
        for t, h, n in [(dq, HQ, "q"), (dk, HKV, "k"), (dv, HKV, "v")]:
            ragged(t.set_output(True), h, off_t["q" if n == "q" else "kv"])
            pack[t] = grads[n]
        pack.update({o_t: data["o"], do_t: data["do"], st_t: stats})
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.B])
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.ALL)
    return g, pack, data, (o_t if not backward else None)


def main():
    handle = cudnn.create_handle()
    print("cuDNN backend", cudnn.backend_version_string(), "frontend", cudnn.__version__)
    batches = [("packed", ultrachat_like()), ("6 x 1250", [1250] * 6 + [TOKENS - 7500])]
    for name, lengths in batches:
        flops = 2.0 * sum(n * n for n in lengths) * D * HQ  # causal forward: 4 * n^2/2 * D per head
        print(f"== {name}: {len(lengths)} documents, longest {max(lengths)}", flush=True)
        for backward in (False, True):
            for longest_first in (False, True):
                try:
                    g, pack, data, o_t = graphs(lengths, handle, backward, longest_first)
                except Exception as e:
                    print("  build failed:", str(e)[:200])
                    continue
                # Plans differ in workspace; one large enough for any of them.
                ws = torch.empty(max(g.get_workspace_size(), 1 << 30), dtype=torch.uint8,
                                 device="cuda")
                f = flops * (2.5 if backward else 1.0)
                tag = ("bwd" if backward else "fwd") + (" longest-first" if longest_first else "")
                plans = range(g.get_execution_plan_count()) if not longest_first else [0]
                for i in plans:
                    try:
                        ms = median_ms(lambda: g.execute_plan_at_index(pack, ws, i, handle=handle))
                        print(f"  {tag} plan {i}: {ms:8.3f} ms {f / ms / 1e9:7.1f} TFLOP/s",
                              flush=True)
                    except Exception as e:
                        print(f"  {tag} plan {i}: {str(e)[:120]}")
                if o_t is not None and longest_first:  # the reordered slots must give the same o
                    sys.path.insert(0, "scripts/gpu")
                    from cudnn_ragged_probe import reference
                    o_ref, _ = reference(data["q"], data["k"], data["v"], lengths, 1.0 / 16)
                    err = (data["o"].float() - o_ref).abs().max().item()
                    print(f"  {tag}: o max abs error {err:.2e}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
