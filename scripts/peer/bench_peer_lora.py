# A copy of the team's shared PyTorch peer benchmark (bench_peer.py) with a --lora option:
# transformers + peft + FLA training LoRA adapters on a frozen bf16 base, the peer of
# `deltatune bench --adapter lora`. Everything else is the shared script's.
"""Peer: PyTorch + transformers training step on a Qwen3.8-27B-shaped slice.

Runs on the GPU machine's stock image (torch 2.11, transformers 5.17). Without
flash-linear-attention installed it measures the seed's baseline path (reference kernels);
--packed uses 1D packing with position_ids (documents then leak into each other in the
Gated DeltaNet layers: that is the peer's behaviour, not ours). Copy this file into an
ignored folder of the checkout and carry it, e.g.
    python3 bench_peer.py --layers 8 --steps 4            # 2D padded, the seed's baseline
    python3 bench_peer.py --layers 8 --packed --profile   # 1D packed
It prints one line starting with RESULT and a JSON object. With --fla, FLA's Triton kernels
compile and autotune on each new batch shape: --warm-all (on by default) runs every timed batch
once untimed first, so the figure is the steady state a long run sees. The peer's best on the
27B-slice is --fla --packed --fused-adam with --ckpt 0 (it fits in 83 GiB); with --ckpt 1 it is
the seed's per-layer checkpointing.
"""
import argparse, json, math, os, random, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--fla", action="store_true", help="put a carried ../.carry/fla package on sys.path")
ap.add_argument("--packed", action="store_true", help="1D packing with position_ids")
ap.add_argument("--budget", type=int, default=8192)
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--ckpt", type=int, default=1)
ap.add_argument("--attn", default="sdpa")
ap.add_argument("--profile", action="store_true")
ap.add_argument("--tag", default="")
ap.add_argument("--warm-all", type=int, default=1, help="run every timed batch once untimed first, so Triton JIT/autotune of new shapes is not timed")
ap.add_argument("--fused-adam", action="store_true", help="torch.optim.AdamW(fused=True)")
ap.add_argument("--cu", action="store_true", help="also pass cu_seq_lens so GDN layers keep documents apart")
ap.add_argument("--lora", type=int, default=0, help="LoRA rank (peft): the base frozen, adapters on every projection")
ap.add_argument("--lora-alpha", type=float, default=0, help="LoRA alpha (default 2 * rank)")
args = ap.parse_args()
if args.fla:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".carry"))

import torch
import transformers
from transformers import Qwen3_5TextConfig
from transformers.models.qwen3_5 import modeling_qwen3_5 as M

torch.manual_seed(0)
dev = torch.device("cuda")

def lengths(n, seed=0):
    r = random.Random(seed)  # ultrachat_200k-like: mean about 1,250 tokens
    return [max(16, min(8192, int(math.exp(r.gauss(7.0, 0.5))))) for _ in range(n)]

def batches_2d(lens, budget):
    out, cur = [], []
    for l in lens:
        if cur and max(max(cur), l) * (len(cur) + 1) > budget:
            out.append(cur); cur = []
        cur.append(l)
    if cur: out.append(cur)
    return out

def batches_1d(lens, budget):
    out, cur, s = [], [], 0
    for l in lens:
        if cur and s + l > budget:
            out.append(cur); cur, s = [], 0
        cur.append(l); s += l
    if cur: out.append(cur)
    return out

layer_types = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(args.layers)]
cfg = Qwen3_5TextConfig(
    vocab_size=248320, hidden_size=5120, intermediate_size=17408, num_hidden_layers=args.layers,
    num_attention_heads=24, num_key_value_heads=4, head_dim=256, linear_num_key_heads=16,
    linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, layer_types=layer_types, rms_norm_eps=1e-6, tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                     "mrope_section": [11, 11, 10], "mrope_interleaved": True},
)
cfg._attn_implementation = args.attn
cls = getattr(M, "Qwen3_5ForCausalLM")
with torch.device(dev):
    model = cls(cfg).to(torch.bfloat16)
nparams = sum(p.numel() for p in model.parameters())
if args.lora:  # PEFT's LoRA on every linear projection of the decoder layers (not the LM head)
    from peft import LoraConfig, get_peft_model
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
               "in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"]
    model = get_peft_model(model, LoraConfig(r=args.lora, lora_alpha=args.lora_alpha or 2 * args.lora,
                                             lora_dropout=0.0, target_modules=targets))
    if args.ckpt:
        model.enable_input_require_grads()  # checkpointed blocks need a grad-requiring input
if args.ckpt:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0, fused=args.fused_adam)
model.train()

info = {"torch": torch.__version__, "transformers": transformers.__version__,
        "fla_available": bool(getattr(M, "is_flash_linear_attention_available", lambda: None)()),
        "gdn_kernel": None, "conv_kernel": None, "params": nparams,
        "trainable_params": sum(p.numel() for p in trainable), "lora_rank": args.lora}
try:
    la = next(m for m in model.modules() if m.__class__.__name__.endswith("GatedDeltaNet"))
    for n in dir(la):
        if "chunk" in n or "conv1d" in n:
            f = getattr(la, n)
            info["impl_" + n] = getattr(f, "__module__", "?") + "." + getattr(f, "__qualname__", type(f).__name__)
except Exception as e:  # report, never hide
    info["probe_error"] = repr(e)

lens = lengths(4000)
bl = batches_1d(lens, args.budget) if args.packed else batches_2d(lens, args.budget)

def make_batch(b):
    if args.packed:
        T = sum(b)
        ids = torch.randint(0, cfg.vocab_size, (1, T), device=dev)
        pos = torch.cat([torch.arange(l, device=dev) for l in b])[None]
        labels = ids.clone()
        cu = torch.tensor([0] + list(__import__('itertools').accumulate(b)), dtype=torch.int32, device=dev)
        kw = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max(b), max_length_k=max(b)) if args.cu else {}
        return dict(input_ids=ids, position_ids=pos, labels=labels, **kw), sum(b), T
    L = max(b)
    ids = torch.randint(0, cfg.vocab_size, (len(b), L), device=dev)
    mask = torch.zeros(len(b), L, dtype=torch.long, device=dev)
    for i, l in enumerate(b): mask[i, :l] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return dict(input_ids=ids, attention_mask=mask, labels=labels), sum(b), len(b) * L

def step(batch):
    out = model(**batch)
    out.loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    return out.loss

for i in range(args.warmup):
    step(make_batch(bl[i])[0])
if args.warm_all:  # steady state: every shape the timed steps use has been compiled and autotuned
    for i in range(args.warmup, args.warmup + args.steps):
        step(make_batch(bl[i])[0])
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
real = padded = 0
t0 = time.perf_counter()
for i in range(args.warmup, args.warmup + args.steps):
    b, r, p = make_batch(bl[i]); real += r; padded += p
    loss = step(b)
torch.cuda.synchronize()
dt = time.perf_counter() - t0
res = dict(info, tag=args.tag, cu=args.cu, layers=args.layers, packed=args.packed, fla=args.fla, ckpt=args.ckpt,
           fused_adam=args.fused_adam, lora=args.lora, warm_all=args.warm_all, steps=args.steps, real_tokens=real, computed_tokens=padded, seconds=round(dt, 3),
           real_tok_s=round(real / dt, 1), computed_tok_s=round(padded / dt, 1),
           batches_for_4000_samples=len(bl), peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
           loss=float(loss.detach()),
           # What ran, not a probe: transformers 5.17 lacks the attribute fla_available reads.
           fla_modules_loaded=sorted({m.split(".")[1] for m in sys.modules
                                      if m.startswith("fla.") and m.count(".") >= 1}))
if args.profile:
    from torch.profiler import profile, ProfilerActivity
    b = make_batch(bl[args.warmup + args.steps])[0]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(b); torch.cuda.synchronize()
    ka = prof.key_averages()
    res["cpu_calls"] = int(sum(e.count for e in ka if e.device_type.name == "CPU"))
    res["gpu_kernels"] = int(sum(e.count for e in ka if e.device_type.name == "CUDA"))
    res["self_cuda_s"] = round(sum(e.self_device_time_total for e in ka) / 1e6, 3)
    res["self_cpu_s"] = round(sum(e.self_cpu_time_total for e in ka) / 1e6, 3)
    print(ka.table(sort_by="self_cuda_time_total", row_limit=12))
print("RESULT " + json.dumps(res))
