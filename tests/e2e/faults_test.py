#!/usr/bin/env python3
"""Faults against a real deltatuned with real rank processes, each checked
against an uninterrupted reference run of the same job: training is deterministic, so a resumed
run must report, for every step, the same loss and the same batch (STEP_METRICS batch_digest, a
hash of the step's document pieces) as the reference: no document skipped or repeated.

  - SIGKILL the daemon mid-job, restart it: the job resumes from its last checkpoint, finishes.
  - SIGKILL a rank: RECOVERING, then resumed.
  - Corrupt the latest checkpoint: CHECKPOINT_CORRUPT and a fallback to the previous one.
  - SIGKILL ranks at random moments while they checkpoint every step: every committed checkpoint
    verifies (sizes and SHA-256 in its manifest), and the job still finishes exactly.
"""
import hashlib
import json
import os
import random
import signal
import tempfile
import time

from harness import Client, Daemon, check, load_stubs, make_tokenized_data, run_tests

STUBS = load_stubs(tempfile.mkdtemp(prefix="deltatune-stubs-"))
D = Daemon(heartbeat_timeout=5)
D.init_model()
make_tokenized_data(D.path("data", "train.jsonl"), 400, seed=3)
D.start()
C = Client(D.port, STUBS)
STEPS = 24


def job_id(name):
    return name.split("/")[1]


REFERENCE = {}


def reference():
    if not REFERENCE:
        name = C.create(C.spec(output="reference", max_steps=STEPS, every=4)).name
        C.wait_state(name, "SUCCEEDED", timeout=300)
        REFERENCE.update({s: r.pop() for s, r in C.step_records(name).items()})
        check(sorted(REFERENCE) == list(range(1, STEPS + 1)), f"reference steps {sorted(REFERENCE)}")
    return REFERENCE


def check_matches_reference(name):
    ref = reference()
    got = C.step_records(name)
    check(sorted(got) == sorted(ref), f"steps reported {sorted(got)}")
    for step, records in got.items():
        check(records == {ref[step]}, f"step {step}: {records} != reference {ref[step]}")


def test_daemon_sigkill_resumes_exactly():
    reference()
    name = C.create(C.spec(output="daemon-kill", max_steps=STEPS, every=4)).name
    C.wait(name, lambda j: j.progress.step >= 10, what="step 10")
    D.stop(signal.SIGKILL)
    time.sleep(0.5)
    D.start()
    job = C.wait_state(name, "SUCCEEDED", timeout=300)
    resumed = [e for e in C.events(name) if e.type == "RESUMED"]
    check(resumed, "no RESUMED event after the daemon restart")
    check(int(resumed[-1].metrics["step"]) >= 8, f"resumed from step {resumed[-1].metrics}")
    check(job.state == C.job_pb2.Job.SUCCEEDED, "not SUCCEEDED")
    check_matches_reference(name)


def test_rank_sigkill_recovers_exactly():
    reference()
    name = C.create(C.spec(output="rank-kill", max_steps=STEPS, every=4)).name
    C.wait(name, lambda j: j.progress.step >= 9, what="step 9")
    pids = D.rank_pids(job_id(name))
    check(len(pids) == 1, f"rank pids {pids}")
    os.kill(pids[0], signal.SIGKILL)
    C.wait_state(name, "SUCCEEDED", timeout=300)
    types = [e.type for e in C.events(name)]
    check("FAULT_DETECTED" in types and "RECOVERY_STARTED" in types, f"events {types}")
    states = [e.message for e in C.events(name) if "RECOVERING" in e.message]
    check(states or "RECOVERY_STARTED" in types, "never RECOVERING")
    check(C.get(name).attempt >= 1, "attempt not counted")
    check_matches_reference(name)


def test_corrupt_latest_checkpoint_falls_back():
    reference()
    name = C.create(C.spec(output="corrupt", max_steps=STEPS, every=4)).name
    C.wait(name, lambda j: j.progress.step >= 13, what="step 13")
    C.stub.PauseJob(C.service_pb2.PauseJobRequest(name=name))
    job = C.wait_state(name, "PAUSED", timeout=60)
    latest = job.latest_checkpoint
    victim = max((f for f in os.listdir(latest) if f != "manifest.json"),
                 key=lambda f: os.path.getsize(os.path.join(latest, f)))
    with open(os.path.join(latest, victim), "r+b") as f:
        f.seek(os.path.getsize(os.path.join(latest, victim)) // 2)
        f.write(b"\xde\xad\xbe\xef")
    C.stub.ResumeJob(C.service_pb2.ResumeJobRequest(name=name))
    C.wait_state(name, "SUCCEEDED", timeout=300)
    events = C.events(name)
    check(any(e.type == "CHECKPOINT_CORRUPT" for e in events), "no CHECKPOINT_CORRUPT event")
    resumed = [e for e in events if e.type == "RESUMED"][-1]
    check(resumed.message != latest, f"resumed from the corrupt checkpoint {latest}")
    check_matches_reference(name)


def verify_committed(root):
    """Every committed step-* folder: its manifest's files exist with their size and SHA-256."""
    n = 0
    for d in sorted(os.listdir(root)):
        path = os.path.join(root, d)
        if not d.startswith("step-") or not os.path.isdir(path):
            continue
        try:
            manifest = json.load(open(os.path.join(path, "manifest.json")))
            files = {name: open(os.path.join(path, name), "rb").read()
                     for name in manifest["files"]}
        except FileNotFoundError:
            # The relaunched rank may prune an old checkpoint while we read it: only a folder
            # that is gone entirely is excused.
            check(not os.path.exists(path), f"{path}: committed but incomplete")
            continue
        for fname, f in manifest["files"].items():
            data = files[fname]
            check(len(data) == f["bytes"], f"{path}/{fname}: size")
            check(hashlib.sha256(data).hexdigest() == f["sha256"], f"{path}/{fname}: sha256")
        n += 1
    return n


def test_kill_during_checkpoint_never_leaves_a_loadable_partial():
    reference()
    spec = C.spec(output="ckpt-kill", max_steps=STEPS, every=1)
    spec.max_restarts = 20
    name = C.create(spec).name
    rng = random.Random(5)
    kills = 0
    while kills < 6 and C.state(name) not in ("SUCCEEDED", "FAILED"):
        pids = D.rank_pids(job_id(name))
        if not pids:
            time.sleep(0.02)
            continue
        time.sleep(rng.uniform(0.05, 0.25))
        try:
            os.kill(pids[0], signal.SIGKILL)
            kills += 1
        except ProcessLookupError:
            pass
        root = os.path.join(D.path("outputs", "ckpt-kill"), "checkpoints")
        if os.path.isdir(root):
            verify_committed(root)
    C.wait_state(name, "SUCCEEDED", timeout=300)
    check(kills >= 3, f"only {kills} kills landed")
    check_matches_reference(name)


REFERENCE2 = {}


def two_rank_spec(output):
    spec = C.spec(output=output, max_steps=STEPS, every=4)
    spec.resources.cpu_ranks = 2
    spec.max_restarts = 5
    return spec


def test_two_rank_job_recovers_from_a_killed_and_a_silent_rank():
    ref = C.create(two_rank_spec("two-ref")).name
    C.wait_state(ref, "SUCCEEDED", timeout=300)
    REFERENCE2.update({s: r.pop() for s, r in C.step_records(ref).items()})
    check(sorted(REFERENCE2) == list(range(1, STEPS + 1)), f"2-rank steps {sorted(REFERENCE2)}")
    for how in (signal.SIGKILL, signal.SIGSTOP):
        name = C.create(two_rank_spec(f"two-{how.name}")).name
        C.wait(name, lambda j: j.progress.step >= 9, what="step 9")
        pids = sorted(D.rank_pids(job_id(name)))
        check(len(pids) == 2, f"rank pids {pids}")
        t0 = time.time()
        os.kill(pids[1], how)
        C.wait(name, lambda j: j.attempt >= 1, timeout=30, what="a recovery")
        detected = time.time() - t0
        if how == signal.SIGSTOP:
            check(detected < 5 + 3, f"silent rank detected after {detected:.1f} s (timeout 5 s)")
        C.wait_state(name, "SUCCEEDED", timeout=300)
        kinds = [e.details["kind"] for e in C.events(name) if e.type == "FAULT_DETECTED"]
        check(kinds, f"{how.name}: no FAULT_DETECTED")
        got = C.step_records(name)
        check(sorted(got) == sorted(REFERENCE2), f"{how.name}: steps {sorted(got)}")
        for step, records in got.items():
            check(records == {REFERENCE2[step]}, f"{how.name}: step {step} {records}")


try:
    run_tests([
        ("SIGKILL the daemon: resumes from its checkpoint, same data", test_daemon_sigkill_resumes_exactly),
        ("SIGKILL a rank: RECOVERING, resumed exactly", test_rank_sigkill_recovers_exactly),
        ("corrupt latest checkpoint: CHECKPOINT_CORRUPT and fallback", test_corrupt_latest_checkpoint_falls_back),
        ("kills during checkpoint writes leave only verifiable checkpoints", test_kill_during_checkpoint_never_leaves_a_loadable_partial),
        ("2 CPU ranks: killed or silent rank, recovered exactly", test_two_rank_job_recovers_from_a_killed_and_a_silent_rank),
    ])
finally:
    D.stop()
