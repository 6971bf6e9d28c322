"""Times torch SDPA's backends (flash, cuDNN, efficient) on the 27B-slice's attention shape
(head_dim 256, 24 query / 4 KV heads, causal), forward and forward+backward, on the GPU machine's
stock torch: which fused attention is worth matching or calling. Prints one JSON line per case.
    python3 scripts/gpu/peer_attention_probe.py
"""
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = torch.device("cuda")
torch.manual_seed(0)


def bench(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters


for docs, length in [(6, 1250), (1, 8192)]:
    q = torch.randn(docs, 24, length, 256, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(docs, 4, length, 256, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(docs, 4, length, 256, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(docs, 24, length, 256, device=dev, dtype=torch.bfloat16)
    flops = 4 * docs * 24 * length * length / 2 * 256  # causal forward
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        res = dict(backend=name, docs=docs, length=length)
        try:
            with sdpa_kernel(backend):
                fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                both = lambda: torch.autograd.backward(fwd(), dy)
                f_ms, b_ms = bench(fwd), bench(both)
            res.update(fwd_ms=round(f_ms, 3), bwd_ms=round(b_ms - f_ms, 3),
                       fwd_tflops=round(flops / f_ms / 1e9, 1),
                       bwd_tflops=round(2.5 * flops / (b_ms - f_ms) / 1e9, 1))
        except Exception as e:  # report, never hide
            res["error"] = repr(e)[:200]
        print(json.dumps(res), flush=True)
