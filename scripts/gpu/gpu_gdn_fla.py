"""FLA's chunk_gated_delta_rule at the 27B layer shape, timed the way gdn_bench times ours.

Forward and forward+backward of one Gated DeltaNet layer's rule (16 key heads, 48 value heads,
dim 128, gates and the q/k L2 norm inside the kernels as ours), on 8192 tokens as one sequence
and as lognormal documents, median of CUDA-event timings after warm-up (Triton compiles and
autotunes during warm-up), then each kernel's time from torch.profiler. Run on the GPU machine
with the fla package carried under .carry/:
    python3 scripts/gpu/gpu_gdn_fla.py
"""
import math
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".carry"))
import torch  # noqa: E402
import fla.ops.common.chunk_o as fla_chunk_o  # noqa: E402
from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: E402

# FLA refuses its gated chunk_bwd_dqkwg on Hopper with Triton 3.4-3.7.0 (its issue #640: wrong
# results; the image has Triton 3.6). Lifted here for timing only: its speed is what it would be.
fla_chunk_o.TRITON_ABOVE_3_7_1 = True

T, HK, HV, D = 8192, 16, 48, 128
dev = torch.device("cuda")


def lognormal_cu(total, seed=0):
    r = random.Random(seed)
    cu = [0]
    while cu[-1] < total:
        cu.append(min(total, cu[-1] + max(16, min(8192, int(math.exp(r.gauss(7.0, 0.5)))))))
    return torch.tensor(cu, dtype=torch.int32, device=dev)


def inputs():
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(1, T, HK, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(1, T, HK, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(1, T, HV, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    a = torch.randn(1, T, HV, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    b = torch.randn(1, T, HV, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    A_log = torch.log(torch.linspace(1, 16, HV, device=dev)).requires_grad_()
    dt_bias = torch.linspace(-1, 1.35, HV, device=dev).requires_grad_()
    do = torch.randn(1, T, HV, D, device=dev, dtype=torch.bfloat16, generator=g)
    return q, k, v, a, b, A_log, dt_bias, do


def run(x, cu, backward):
    q, k, v, a, b, A_log, dt_bias, do = x
    o, _ = chunk_gated_delta_rule(q, k, v, g=a, beta=b.sigmoid(), scale=D ** -0.5,
                                  use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                  A_log=A_log, dt_bias=dt_bias, cu_seqlens=cu)
    if backward:
        o.backward(do)


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times), min(times), max(times)


def kernel_table(fn):
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = {}
    for ev in prof.events():
        if ev.device_type.name != "CUDA":
            continue
        n = ev.name.split("(")[0][:58]
        c, t = rows.get(n, (0, 0.0))
        rows[n] = (c + 1, t + ev.device_time_total / 1e3)
    for n, (c, t) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"  {n:58s} {c:4d} {t:8.3f} ms")


def main():
    x = inputs()
    for label, cu in (("one sequence", torch.tensor([0, T], dtype=torch.int32, device=dev)),
                      ("lognormal documents", lognormal_cu(T))):
        fwd = median_ms(lambda: run(x, cu, False))
        both = median_ms(lambda: run(x, cu, True))
        print(f"FLA chunk_gated_delta_rule 27B shape, {T} tokens, {label} ({len(cu) - 1} docs): "
              f"fwd {fwd[0]:.3f} ms [{fwd[1]:.3f}-{fwd[2]:.3f}], fwd+bwd {both[0]:.3f} ms "
              f"[{both[1]:.3f}-{both[2]:.3f}], bwd {both[0] - fwd[0]:.3f} ms")
        kernel_table(lambda: run(x, cu, True))
        print(f"RESULT_FLA {label}: fwd_ms={fwd[0]:.3f} fwd_bwd_ms={both[0]:.3f}", flush=True)


if __name__ == "__main__":
    main()
