#!/usr/bin/env python3
"""Sharded data-parallel training over Gloo between real processes (`deltatune train` ranks):

  - world sizes 1, 2 and 3 (uneven shards) train the same 3 steps on the same global batches
    (data_shards 6): equal losses and updated parameters (relative error < 1e-6);
  - a world-size-2 checkpoint resumed at 2 equals the uninterrupted run;
  - resumed at 3 it continues the same data stream (same batch digests) with the same losses;
  - a rank that stops answering is detected within the collective timeout: no rank hangs.
"""
import json
import os
import signal
import struct
import subprocess
import tempfile
import time
from array import array

from harness import CLI, SOURCE, check, make_tokenized_data, run_tests

ROOT = tempfile.mkdtemp(prefix="deltatune-sharded-")
MODEL = os.path.join(ROOT, "model")
DATA = os.path.join(ROOT, "train.jsonl")
subprocess.run([CLI, "init-model", "--config", os.path.join(SOURCE, "configs/models/tiny-a.json"),
                "--out", MODEL, "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
make_tokenized_data(DATA, 300, seed=11)


def job_yaml(name, max_steps, every=0):
    path = os.path.join(ROOT, f"{name}-{max_steps}.yaml")
    with open(path, "w") as f:
        f.write(f"""model: {MODEL}
output_dir: {os.path.join(ROOT, name)}
data:
  train_files: [{DATA}]
  format: tokenized
  shuffle_window: 64
hyperparameters:
  learning_rate: 0.003
  lr_schedule: constant
  max_steps: {max_steps}
  tokens_per_batch: 128
checkpoint:
  every_n_steps: {every}
  keep_last_n: 5
seed: 5
""")
    return path


def train(name, world, max_steps, every=0, timeout=60):
    """Runs `world` ranks to completion; returns rank 0's JSON lines."""
    store = tempfile.mkdtemp(prefix="rdv-", dir=ROOT)
    procs = [subprocess.Popen([CLI, "train", job_yaml(name, max_steps, every), "--rank", str(r),
                               "--world-size", str(world), "--rendezvous", store,
                               "--data-shards", "6", "--timeout", "30"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        check(p.returncode == 0, f"{name} rank {r}/{world} exit {p.returncode}: {err}")
    return [json.loads(line) for line in outs[0][0].splitlines() if line.strip()]


def steps(lines):
    return {int(e["step"]): (e["loss"], e["batch_digest"]) for e in lines
            if e["event"] == "STEP_METRICS"}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        check(t["dtype"] == "F32", f"{name}: {t['dtype']}")
        b, e = t["data_offsets"]
        out[name] = array("f", data[b:e])
    return out


def params(name):
    return read_safetensors(os.path.join(ROOT, name, "export", "model.safetensors"))


WORST = {}


def check_params_close(a, b, what):
    """Per tensor ||a - b|| / ||b|| < 1e-6 (the repository's relative error)."""
    check(a.keys() == b.keys(), f"{what}: different tensors")
    for k in a:
        num = sum((x - y) ** 2 for x, y in zip(a[k], b[k]))
        den = sum(y * y for y in b[k]) or 1.0
        err = (num / den) ** 0.5
        WORST[what] = max(WORST.get(what, 0.0), err)
        check(err < 1e-6, f"{what}: {k} differs by {err:.2e}")


def check_steps_close(a, b, what):
    check(sorted(a) == sorted(b), f"{what}: steps {sorted(a)} vs {sorted(b)}")
    for s in a:
        (la, da), (lb, db) = a[s], b[s]
        check(da == db, f"{what}: step {s} trained on other documents")
        check(abs(la - lb) / abs(lb) < 1e-6, f"{what}: step {s} loss {la} vs {lb}")


RESULTS = {}


def test_world_sizes_agree():
    for w in (1, 2, 3):
        RESULTS[w] = steps(train(f"w{w}", w, 3))
    for w in (2, 3):
        check_steps_close(RESULTS[w], RESULTS[1], f"world {w} vs 1")
        check_params_close(params(f"w{w}"), params("w1"), f"world {w} vs 1")


def test_resume_same_and_other_world_size():
    full = steps(train("full2", 2, 4))
    first = steps(train("resume2", 2, 2, every=1))
    rest = train("resume2", 2, 4)  # same output_dir: resumes from step 2
    check(any(e["event"] == "RESUMED" and int(e["step"]) == 2 for e in rest), "did not resume at 2")
    check_steps_close({**first, **steps(rest)}, full, "2 -> 2 resume")
    check_params_close(params("resume2"), params("full2"), "2 -> 2 resume")
    first = steps(train("reshard", 2, 2, every=1))
    rest = train("reshard", 3, 4)  # world size 3 from a world-size-2 checkpoint
    check(any(e["event"] == "RESUMED" and int(e["step"]) == 2 for e in rest), "did not resume at 2")
    check_steps_close({**first, **steps(rest)}, full, "2 -> 3 reshard")
    check_params_close(params("reshard"), params("full2"), "2 -> 3 reshard")


def test_silent_rank_is_detected():
    store = tempfile.mkdtemp(prefix="rdv-", dir=ROOT)
    yaml = job_yaml("silent", 400)
    procs = [subprocess.Popen([CLI, "train", yaml, "--rank", str(r), "--world-size", "2",
                               "--rendezvous", store, "--timeout", "3"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    line = procs[0].stdout.readline()  # the first step is done: the ranks are connected
    check(line, "no step before the pause")
    os.kill(procs[1].pid, signal.SIGSTOP)
    t0 = time.time()
    try:
        _, err = procs[0].communicate(timeout=30)
    finally:
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait()
    elapsed = time.time() - t0
    check(procs[0].returncode != 0, "rank 0 did not fail")
    check("gloo" in err, f"rank 0's error does not name the collective: {err}")
    check(elapsed < 15, f"detected after {elapsed:.1f} s with a 3 s timeout")


import atexit  # noqa: E402
atexit.register(lambda: print("worst parameter relative errors: " +
                              ", ".join(f"{k} {v:.1e}" for k, v in WORST.items())))
run_tests([
    ("world sizes 1, 2, 3 train identically", test_world_sizes_agree),
    ("resume at 2 and reshard to 3 continue exactly", test_resume_same_and_other_world_size),
    ("a silent rank is detected within the timeout", test_silent_rank_is_detected),
])
