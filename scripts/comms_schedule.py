#!/usr/bin/env python3
"""The FSDP communication schedule on paper for a Qwen3.5 config (README "Sharding"): per GPU and
step, the bytes runtime/dist/fsdp_gpu moves (bf16 all-gathers of the embedding and every layer
in the forward and again in the backward, the head once; fp32 reduce-scatters of every unit
once), their time at an NVLink bus bandwidth, and the compute time that hides them (model FLOPs
at a given MFU; per layer, the prefetched gather of the next layer against this layer's work).

  python3 scripts/comms_schedule.py configs/models/qwen3.8-27b.json --gpus 4 8
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--gpus", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per GPU per step")
    ap.add_argument("--busbw", type=float, default=360e9,
                    help="NCCL all-gather/reduce-scatter bus bandwidth, bytes/s (H200 NVLink)")
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
    print("| GPUs | all-gather bf16 GB | reduce-scatter fp32 GB | total GB/step/GPU | at %.0f GB/s | "
          "share of compute | largest layer gather | its layer's forward |" % (a.busbw / 1e9))
    print("|---|---|---|---|---|---|---|---|")
    for w in a.gpus:
        f = (w - 1) / w
        ag = 2 * f * (2 * (embed + sum(layers)) + head)
        rs = 4 * f * P
        t = (ag + rs) / a.busbw
        layer_gather_ms = 2 * f * max(layers) / a.busbw * 1e3
        layer_fwd_ms = compute_s / len(layers) / 4 * 1e3  # fwd ~ 1/4 of fwd + recompute + bwd
        print(f"| {w} | {ag / 1e9:.1f} | {rs / 1e9:.1f} | {(ag + rs) / 1e9:.1f} | {t:.2f} s | "
              f"{t / compute_s:.1%} | {layer_gather_ms:.2f} ms | {layer_fwd_ms:.1f} ms |")


if __name__ == "__main__":
    main()
