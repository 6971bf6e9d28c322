#!/usr/bin/env python3
"""Which cuDNN SDPA graph settings give correct packed (ragged, THD) causal GQA attention?

Diagnostic for kernels/attention/attention_cudnn.cc, run on the GPU machine (torch + the cudnn-frontend
Python wheel on sys.path, e.g. PYTHONPATH=.carry/cfe). For each variant (implementation, ragged
offset dtype, ragged or dense stats, batch stride) it builds the forward graph the C++ code
builds, runs it on packed documents of awkward lengths and prints the worst error of o and of the
stats per document against a float32 torch reference.
"""
import itertools
import math
import sys

import torch
import cudnn

D = 256


def reference(q, k, v, lengths, scale):
    """Per-document causal GQA attention in float32: o (T, Hq, D), lse (T, Hq)."""
    hq, hkv = q.shape[1], k.shape[1]
    o, lse, start = [], [], 0
    for n in lengths:
        qs = q[start:start + n].float().transpose(0, 1)  # (Hq, n, D)
        ks = k[start:start + n].float().transpose(0, 1).repeat_interleave(hq // hkv, 0)
        vs = v[start:start + n].float().transpose(0, 1).repeat_interleave(hq // hkv, 0)
        s = qs @ ks.transpose(1, 2) * scale
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), -math.inf)
        lse.append(torch.logsumexp(s, -1).transpose(0, 1))
        o.append((torch.softmax(s, -1) @ vs).transpose(0, 1))
        start += n
    return torch.cat(o), torch.cat(lse)


def run(variant, lengths, hq, hkv, handle):
    impl, off_dtype, ragged_stats, batch_stride_max = variant
    torch.manual_seed(0)
    t, b = sum(lengths), len(lengths)
    s_max = 1 << max(6, (max(lengths) - 1).bit_length())
    q = torch.randn(t, hq, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(t, hkv, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(t, hkv, D, dtype=torch.bfloat16, device="cuda")
    o = torch.full((t, hq, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    seq = torch.tensor(lengths, dtype=torch.int32, device="cuda").view(b, 1, 1, 1)
    cum = torch.cat([torch.zeros(1, dtype=torch.int64, device="cuda"),
                     torch.cumsum(seq.flatten().long(), 0)]).view(b + 1, 1, 1, 1)
    offs = {name: (cum * mult).to(off_dtype) for name, mult in
            [("q", hq * D), ("kv", hkv * D), ("stats", hq)]}
    if ragged_stats:
        stats = torch.full((t, hq), float("nan"), dtype=torch.float32, device="cuda")
    else:
        stats = torch.full((b, hq, s_max, 1), float("nan"), dtype=torch.float32, device="cuda")

    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16,
                      intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)

    def ragged(name, heads, off):
        bs = 2**31 - 1 if batch_stride_max else s_max * heads * D
        tensor = g.tensor(name=name, dim=[b, heads, s_max, D], stride=[bs, D, heads * D, 1],
                          data_type=cudnn.data_type.BFLOAT16)
        tensor.set_ragged_offset(off)
        return tensor

    off_t = {name: g.tensor_like(x) for name, x in offs.items()}
    q_t, k_t, v_t = ragged("q", hq, off_t["q"]), ragged("k", hkv, off_t["kv"]), ragged("v", hkv, off_t["kv"])
    seq_q, seq_kv = g.tensor_like(seq), g.tensor_like(seq)
    o_t, stats_t = g.sdpa(name="sdpa", q=q_t, k=k_t, v=v_t, generate_stats=True,
                          attn_scale=1.0 / 16, use_padding_mask=True, seq_len_q=seq_q,
                          seq_len_kv=seq_kv, diagonal_band_right_bound=0,
                          diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                          implementation=impl)
    bs = 2**31 - 1 if batch_stride_max else s_max * hq * D
    o_t.set_output(True).set_dim([b, hq, s_max, D]).set_stride([bs, D, hq * D, 1])
    o_t.set_ragged_offset(off_t["q"])
    stats_t.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    if ragged_stats:
        stats_t.set_dim([b, hq, s_max, 1]).set_stride([s_max * hq, 1, hq, 1])
        stats_t.set_ragged_offset(off_t["stats"])
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")
    pack = {q_t: q, k_t: k, v_t: v, o_t: o, stats_t: stats, seq_q: seq, seq_kv: seq}
    pack.update({off_t[n]: offs[n] for n in offs})
    g.execute(pack, ws, handle=handle)
    torch.cuda.synchronize()
    o_ref, lse_ref = reference(q, k, v, lengths, 1.0 / 16)
    if not ragged_stats:  # (b, hq, s_max, 1) -> (t, hq)
        stats = torch.cat([stats[i, :, :n, 0].transpose(0, 1) for i, n in enumerate(lengths)])
    o_err, s_err, start = [], [], 0
    for n in lengths:
        sl = slice(start, start + n)
        o_err.append((o[sl].float() - o_ref[sl]).abs().nan_to_num(1e9).max().item())
        s_err.append((stats[sl] - lse_ref[sl]).abs().nan_to_num(1e9).max().item())
        start += n
    return max(o_err), max(s_err), o_err


def main():
    handle = cudnn.create_handle()
    print("cuDNN backend", cudnn.backend_version_string(), "frontend", cudnn.__version__)
    impls = [cudnn.attention_implementation.AUTO, cudnn.attention_implementation.COMPOSITE,
             cudnn.attention_implementation.UNIFIED]
    variants = itertools.product(impls, [torch.int32, torch.int64], [True, False], [False, True])
    cases = [([3, 130, 1, 64, 200], 4, 2), ([70], 4, 2), ([33, 1, 97], 1, 1)]
    for variant in variants:
        name = f"{variant[0].name:9s} {str(variant[1])[6:]:5s} stats={'ragged' if variant[2] else 'dense '} bstride={'INT_MAX' if variant[3] else 'dense  '}"
        line = []
        for lengths, hq, hkv in cases:
            try:
                o_err, s_err, per_doc = run(variant, lengths, hq, hkv, handle)
                line.append(f"{hq}/{hkv}x{len(lengths)}: o {o_err:.1e} lse {s_err:.1e}")
            except Exception as e:  # a variant cuDNN refuses
                line.append(f"{hq}/{hkv}x{len(lengths)}: {type(e).__name__}: {str(e)[:80]}")
        print(name, " | ".join(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
