#!/usr/bin/env python3
"""The FSDP communication schedule on paper for a Qwen3.5 config (docs/architecture.md): per GPU
and step, the bytes runtime/distributed/fsdp_gpu moves (bf16 all-gathers of the embedding and every
layer in the forward and again in the backward, the head once; fp32 reduce-scatters of every
unit once), their time, and the compute time that hides them (model FLOPs at a given MFU; per
layer, the prefetched gather of the next layer against this layer's work).

One node (--gpus): NVLink only. Several nodes (--nodes, --gpus-per-node): FSDP over every GPU
rides NCCL rings that cross the nodes on InfiniBand (one NIC per GPU, rail-aligned: a ring's
bus bandwidth is the NICs' rate, so the collective runs at the slower of NVLink and IB), and the
hybrid alternative (HSDP: shard within a node, replicate across nodes) moves the same gathers on
NVLink plus one fp32 all-reduce of each GPU's gradient shard across the nodes on its NIC.

  python3 scripts/tools/comms_schedule.py configs/models/qwen3.8-27b.json --gpus 4 8
  python3 scripts/tools/comms_schedule.py configs/models/qwen3.8-27b.json --nodes 1 2 4 --gpus-per-node 8
"""
import argparse
import json


def unit_params(c):
    H, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    D, nq, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    hk, hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    conv = 2 * hk * dk + hv * dv
    gdn = conv * H + hv * dv * H + 2 * hv * H + conv * K + 2 * hv + dv + H * hv * dv
    attn = 2 * nq * D * H + 2 * nkv * D * H + H * nq * D + 2 * D
    layers = [(gdn if t == "linear_attention" else attn) + 3 * I * H + 2 * H
              for t in c["layer_types"]]
    tied = c.get("tie_word_embeddings", False)
    embed = 0 if tied else V * H
    head = H + V * H
    return embed, layers, head


def fsdp_bytes(embed, layers, head, world):
    """Per GPU and step: bf16 all-gathers (forward and backward), fp32 reduce-scatters."""
    f = (world - 1) / world
    ag = 2 * f * (2 * (embed + sum(layers)) + head)
    rs = 4 * f * (embed + sum(layers) + head)
    return ag, rs


def one_node(a, embed, layers, head, compute_s):
    print("| GPUs | all-gather bf16 GB | reduce-scatter fp32 GB | total GB/step/GPU | at %.0f GB/s | "
          "share of compute | largest layer gather | its layer's forward |" % (a.busbw / 1e9))
    print("|---|---|---|---|---|---|---|---|")
    for w in a.gpus:
        ag, rs = fsdp_bytes(embed, layers, head, w)
        t = (ag + rs) / a.busbw
        layer_gather_ms = 2 * (w - 1) / w * max(layers) / a.busbw * 1e3
        layer_fwd_ms = compute_s / len(layers) / 4 * 1e3  # fwd ~ 1/4 of fwd + recompute + bwd
        print(f"| {w} | {ag / 1e9:.1f} | {rs / 1e9:.1f} | {(ag + rs) / 1e9:.1f} | {t:.2f} s | "
              f"{t / compute_s:.1%} | {layer_gather_ms:.2f} ms | {layer_fwd_ms:.1f} ms |")


def several_nodes(a, embed, layers, head, compute_s):
    G = a.gpus_per_node
    ib = a.ib_gbps / 8 * 1e9 * a.ib_efficiency  # bytes/s per NIC, achieved
    collectives = 3 * len(layers) + 4  # per step: two gathers and one reduce-scatter per unit
    layer_fwd_ms = compute_s / len(layers) / 4 * 1e3
    print(f"\n{G} GPUs per node, NVLink bus bandwidth {a.busbw / 1e9:.0f} GB/s, InfiniBand "
          f"{a.ib_gbps:.0f} Gb/s per GPU at {a.ib_efficiency:.0%} ({ib / 1e9:.1f} GB/s); ring hop "
          f"latency {a.nvlink_hop_us:.0f} us on NVLink, {a.ib_hop_us:.0f} us across nodes")
    print("| nodes x GPUs | scheme | GB/step/GPU | IB GB/step/NIC | bandwidth time | latency "
          "| share of compute | largest layer gather | its layer's forward |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in a.nodes:
        w = n * G
        ag, rs = fsdp_bytes(embed, layers, head, w)
        if n == 1:
            rows = [("FSDP", ag + rs, 0.0, (ag + rs) / a.busbw, (w - 1) * a.nvlink_hop_us,
                     2 * (w - 1) / w * max(layers) / a.busbw)]
        else:
            bw = min(a.busbw, a.nics_per_node * ib)  # one ring per NIC, each at the NIC's rate
            hop = a.ib_hop_us * n + a.nvlink_hop_us * (w - n)  # n of the w hops cross nodes
            # One ring per NIC: each NIC carries its ring's share across the node boundary.
            rows = [("FSDP over all", ag + rs, (ag + rs) / a.nics_per_node, (ag + rs) / bw, hop,
                     2 * (w - 1) / w * max(layers) / bw)]
            # HSDP: FSDP within the node (NVLink), then each GPU's fp32 gradient shard
            # all-reduced with its peers on the other nodes (one NIC each): 2 (n-1)/n of it.
            g_ag, g_rs = fsdp_bytes(embed, layers, head, G)
            shard = 4 * (embed + sum(layers) + head) / G
            ar = 2 * (n - 1) / n * shard
            t = (g_ag + g_rs) / a.busbw + ar / ib
            rows.append(("HSDP (shard in node)", g_ag + g_rs + ar, ar, t,
                         (G - 1) * a.nvlink_hop_us + 2 * (n - 1) * a.ib_hop_us / len(layers),
                         2 * (G - 1) / G * max(layers) / a.busbw))
        for scheme, moved, over_ib, t, hop_us, gather_s in rows:
            lat = collectives * hop_us * 1e-6
            print(f"| {n} x {G} | {scheme} | {moved / 1e9:.1f} | {over_ib / 1e9:.1f} | {t:.2f} s | "
                  f"{lat * 1e3:.0f} ms | {(t + lat) / compute_s:.1%} | {gather_s * 1e3:.2f} ms | "
                  f"{layer_fwd_ms:.1f} ms |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--gpus", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--nodes", type=int, nargs="+", help="several nodes: node counts to tabulate")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per GPU per step")
    ap.add_argument("--busbw", type=float, default=360e9,
                    help="NCCL all-gather/reduce-scatter bus bandwidth, bytes/s (H200 NVLink)")
    ap.add_argument("--ib-gbps", type=float, default=400, help="InfiniBand rate per GPU, Gb/s")
    ap.add_argument("--nics-per-node", type=int, default=8)
    ap.add_argument("--ib-efficiency", type=float, default=0.85,
                    help="achieved fraction of the IB line rate")
    ap.add_argument("--nvlink-hop-us", type=float, default=2.0)
    ap.add_argument("--ib-hop-us", type=float, default=6.0)
    ap.add_argument("--mfu", type=float, default=0.366, help="compute efficiency (27B-slice bench)")
    a = ap.parse_args()
    c = json.load(open(a.config))
    embed, layers, head = unit_params(c)
    P = embed + sum(layers) + head
    flops = 6 * (P - embed) * a.tokens  # matmul FLOPs (attention/GDN extras are ~5% more)
    compute_s = flops / (a.mfu * 989.4e12)
    print(f"{a.config}: {P / 1e9:.2f} B parameters, {len(layers)} layers "
          f"(largest {max(layers) / 1e9:.3f} B), embedding {embed / 1e9:.2f} B, head {head / 1e9:.2f} B")
    print(f"compute per step at {a.tokens} tokens/GPU and {a.mfu:.1%} MFU: {compute_s:.2f} s "
          f"(per layer {compute_s / len(layers) * 1e3:.1f} ms forward + backward + recompute)")
    if a.nodes:
        several_nodes(a, embed, layers, head, compute_s)
    else:
        one_node(a, embed, layers, head, compute_s)


if __name__ == "__main__":
    main()
