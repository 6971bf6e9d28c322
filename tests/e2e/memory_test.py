#!/usr/bin/env python3
"""Host memory of CPU ranks, measured as the kernel counts it (the peak resident set of each rank
process, from wait4): `deltatune train` of one step of a 142 M-parameter Qwen3.5 (16,384-token
vocabulary, hidden 1,024, 8 layers, bf16 checkpoint), with its checkpoint and export.

  - World size 1: at most 20 bytes per parameter. The fp32 parameters, gradients and AdamW
    moments are 16; the checkpoint's weights are read into the parameters (no second copy, the
    mapped file's pages given back), the parameters are the master weights, and one micro-batch
    a step needs no fp64 accumulator (gradient accumulation adds 8 bytes per parameter).
  - World size 2: each rank at most 0.6x of world size 1. Parameters, gradients and moments are
    sharded (16 / W bytes per parameter) and the model gathers one unit (embedding, a layer, the
    head) at a time, giving its pages back after.
  - LoRA (rank 16, every projection), world size 1: at most 8 bytes per parameter of the base:
    its fp32 weights held once (no gradient of the frozen projections, embedding or head is
    formed; only the small ones the blocks compute on the way), the adapter's state beside.
  - A process that does no GPU work (`deltatune --version`) stays under 64 MiB: cuBLAS, cuBLASLt
    and NVRTC are opened on first call, not at start.
  - `deltatune export` of a LoRA job's checkpoint holds at most 1 byte per parameter of the base:
    the adapter comes from the checkpoint's optimizer state and the base is only opened (before,
    the CLI read the whole base into fp32, over 4 bytes per parameter).

Before (c99b1d2) the same runs peaked at 33.2 bytes per parameter at world size 1 and 25.2 per
rank at world size 2 (0.78x); at 5732bf0, 17.9 and 10.9 (0.61x), of which 1.7 bytes per parameter
were the cuBLAS libraries every process loaded at start (now opened on a GPU rank's first call).
"""
import json
import os
import random
import shutil
import subprocess
import tempfile

from harness import CLI, SOURCE, Daemon, check, run_tests

ROOT = tempfile.mkdtemp(prefix="deltatune-memory-")
MODEL = os.path.join(ROOT, "model")
DATA = os.path.join(ROOT, "data.jsonl")
VOCAB = 16384


def config():
    with open(os.path.join(SOURCE, "configs", "models", "tiny-a.json")) as f:
        c = json.load(f)
    c.update({"vocab_size": VOCAB, "hidden_size": 1024, "intermediate_size": 2816,
              "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
              "head_dim": 128, "linear_num_key_heads": 8, "linear_num_value_heads": 8,
              "linear_key_head_dim": 128, "linear_value_head_dim": 128,
              "tie_word_embeddings": False, "dtype": "bfloat16"})
    return c


def setup():
    path = os.path.join(ROOT, "config.json")
    with open(path, "w") as f:
        json.dump(config(), f)
    subprocess.run([CLI, "init-model", "--config", path, "--out", MODEL], check=True,
                   capture_output=True)
    rng = random.Random(0)
    with open(DATA, "w") as f:
        for _ in range(16):
            f.write(json.dumps({"input_ids": [rng.randrange(VOCAB) for _ in range(rng.randint(8, 30))]})
                    + "\n")


def parameters():
    with open(os.path.join(MODEL, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    count = 0
    for t in header.values():
        size = 1
        for d in t["shape"]:
            size *= d
        count += size
    return count


LORA = ("adapter:\n  type: lora\n  rank: 16\n  alpha: 32\n"
        "  target_modules: [q_proj, k_proj, v_proj, o_proj, in_proj_qkv, in_proj_z, out_proj, "
        "gate_proj, up_proj, down_proj]\n")


def train(world, adapter=""):
    """Runs the job (one step, its checkpoint and export) at `world` ranks: each rank's peak RSS."""
    tag = f"{world}{'-lora' if adapter else ''}"
    out = os.path.join(ROOT, f"out-{tag}")
    job = os.path.join(ROOT, f"job-{tag}.yaml")
    with open(job, "w") as f:
        f.write(f"model: {MODEL}\noutput_dir: {out}\ndata:\n  train_files: [{DATA}]\n"
                "hyperparameters:\n  learning_rate: 0.001\n  max_steps: 1\n  tokens_per_batch: 32\n"
                + adapter)
    rdv = os.path.join(ROOT, f"rdv-{tag}")
    os.makedirs(rdv)
    procs = [subprocess.Popen([CLI, "train", job] + (["--rank", str(r), "--world-size", str(world),
                                                     "--rendezvous", rdv] if world > 1 else []),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(world)]
    peaks = []
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        log = p.stdout.read().decode()
        check(os.waitstatus_to_exitcode(status) == 0, f"rank exited {status}: {log[-2000:]}")
        peaks.append(usage.ru_maxrss * 1024)
    exported = "adapter_model.safetensors" if adapter else "model.safetensors"
    check(os.path.exists(os.path.join(out, "export", exported)), "no export written")
    return peaks


RESULTS = {}


def test_world_size_1_within_20_bytes_per_parameter():
    n = parameters()
    check(n > 140_000_000, f"{n} parameters: the model should be about 142 M")
    peaks = train(1)
    RESULTS[1] = peaks
    per_param = peaks[0] / n
    print(f"  world size 1: peak RSS {peaks[0] / 2**30:.2f} GiB = {per_param:.1f} bytes/parameter")
    check(per_param <= 20, f"{per_param:.1f} bytes per parameter at world size 1, limit 20")


def test_world_size_2_at_most_0_6x():
    n = parameters()
    peaks = train(2)
    one = RESULTS[1][0]
    for r, peak in enumerate(peaks):
        print(f"  world size 2, rank {r}: peak RSS {peak / 2**30:.2f} GiB = {peak / n:.1f} "
              f"bytes/parameter ({peak / one:.2f}x world size 1)")
        check(peak <= 0.6 * one, f"rank {r}: {peak / one:.2f}x world size 1, limit 0.6x")


def test_a_process_without_gpu_work_loads_no_cuda_math_library():
    p = subprocess.Popen([CLI, "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    check(os.waitstatus_to_exitcode(status) == 0, "deltatune --version failed")
    peak = usage.ru_maxrss * 1024
    print(f"  deltatune --version: peak RSS {peak / 2**20:.0f} MiB")
    # Linked at start, cuBLAS(Lt) and NVRTC alone took 245 MB.
    check(peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB: a GPU library loaded at start?")


def test_lora_holds_the_base_once():
    n = parameters()
    peak = train(1, LORA)[0]
    print(f"  LoRA, world size 1: peak RSS {peak / 2**30:.2f} GiB = {peak / n:.1f} bytes/parameter")
    check(peak / n <= 8, f"{peak / n:.1f} bytes per parameter of the base, limit 8")


def test_lora_export_from_the_cli_opens_the_base_only():
    """A LoRA job through a daemon, then `deltatune export` of its checkpoint: the CLI's peak RSS.
    Runs last: it moves the model and data under the daemon's roots."""
    n = parameters()
    d = Daemon(root=os.path.join(ROOT, "daemon"))
    os.rename(MODEL, d.path("models", "m"))
    os.rename(DATA, d.path("data", "d.jsonl"))
    job = d.path("job.yaml")
    with open(job, "w") as f:
        f.write("model: m\noutput_dir: lora\ndata:\n  train_files: [d.jsonl]\n"
                "hyperparameters:\n  learning_rate: 0.001\n  max_steps: 1\n  tokens_per_batch: 32\n"
                "checkpoint: {every_n_steps: 1}\n" + LORA)
    d.start()
    try:
        env = dict(os.environ, DELTATUNE_ADDRESS=f"127.0.0.1:{d.port}")
        r = subprocess.run([CLI, "submit", job, "--watch"], env=env, capture_output=True, text=True,
                           timeout=600)
        check(r.returncode == 0, f"submit --watch: {r.returncode} {r.stderr[-1000:]}")
        name = next(w for w in r.stdout.split() if w.startswith("jobs/"))
        p = subprocess.Popen([CLI, "export", name, "--out", d.path("outputs", "again")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
        log = p.stdout.read().decode()
        check(os.waitstatus_to_exitcode(status) == 0, f"export: {log[-1000:]}")
    finally:
        d.stop()
    peak = usage.ru_maxrss * 1024
    print(f"  deltatune export of the LoRA job: peak RSS {peak / 2**20:.0f} MiB = "
          f"{peak / n:.2f} bytes per parameter of the base")
    check(peak / n <= 1, f"{peak / n:.2f} bytes per parameter of the base, limit 1")


if __name__ == "__main__":
    try:
        setup()
        run_tests([("world size 1: at most 20 bytes per parameter",
                    test_world_size_1_within_20_bytes_per_parameter),
                   ("world size 2: each rank at most 0.6x of world size 1",
                    test_world_size_2_at_most_0_6x),
                   ("LoRA: the frozen base held once", test_lora_holds_the_base_once),
                   ("a process without GPU work loads no CUDA math library",
                    test_a_process_without_gpu_work_loads_no_cuda_math_library),
                   ("LoRA export from the CLI opens the base only",
                    test_lora_export_from_the_cli_opens_the_base_only)])
    finally:
        shutil.rmtree(ROOT, ignore_errors=True)
