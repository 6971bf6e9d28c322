#!/usr/bin/env python3
"""The job lifecycle through an independent Python grpcio client and through the C++ CLI, against
a real deltatuned with real rank processes: create (validate_only, idempotent request_id), get,
list with pagination and filters, watch, events resumed from a sequence, pause, resume, cancel in
each state, delete, the admin HTTP endpoints, and hostile requests."""
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

from harness import CLI, SOURCE, check, run_tests, started_daemon

D, C = started_daemon()
Job = C.job_pb2.Job
GRPC = C.grpc


def code_of(fn):
    try:
        fn()
    except GRPC.RpcError as e:
        return e.code()
    return GRPC.StatusCode.OK


def cli(*args):
    env = dict(os.environ, DELTATUNE_ADDRESS=f"127.0.0.1:{D.port}")
    r = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=300)
    return r.returncode, r.stdout, r.stderr


def test_create_get_idempotent():
    spec = C.spec(output="idem", max_steps=4)
    before = len(C.stub.ListJobs(C.service_pb2.ListJobsRequest(page_size=1000)).jobs)
    dry = C.create(spec, validate_only=True)
    after = len(C.stub.ListJobs(C.service_pb2.ListJobsRequest(page_size=1000)).jobs)
    check(dry.name == "" and before == after, "validate_only must not create a job")
    a = C.create(spec, request_id="req-1")
    b = C.create(spec, request_id="req-1")
    check(a.name == b.name, f"same request_id gave {a.name} and {b.name}")
    other = C.spec(output="idem", max_steps=5)
    check(code_of(lambda: C.create(other, request_id="req-1")) == GRPC.StatusCode.ALREADY_EXISTS,
          "same request_id with another spec must be ALREADY_EXISTS")
    C.wait_state(a.name, "SUCCEEDED")
    job = C.get(a.name)
    check(job.result_model.endswith("export"), f"result_model {job.result_model}")
    check(os.path.exists(os.path.join(job.result_model, "model.safetensors")), "no export")


def test_list_pagination_and_filters():
    names = {C.create(C.spec(output=f"list{i}", max_steps=2), request_id=f"list-{i}").name
             for i in range(5)}
    for n in names:
        C.wait_state(n, "SUCCEEDED")
    seen, token = [], ""
    while True:
        r = C.stub.ListJobs(C.service_pb2.ListJobsRequest(page_size=2, page_token=token))
        check(len(r.jobs) <= 2, "page larger than page_size")
        seen += [j.name for j in r.jobs]
        token = r.next_page_token
        if not token:
            break
    check(len(seen) == len(set(seen)), "duplicates across pages")
    check(names <= set(seen), "pages miss jobs")
    r = C.stub.ListJobs(C.service_pb2.ListJobsRequest(state=Job.FAILED))
    check(all(j.state == Job.FAILED for j in r.jobs), "state filter")
    spec = C.spec(output="lab", max_steps=2, labels={"team": "blue"})
    blue = C.create(spec).name
    r = C.stub.ListJobs(C.service_pb2.ListJobsRequest(labels={"team": "blue"}))
    check([j.name for j in r.jobs] == [blue], "label filter")
    for size in (-1, 1 << 30):
        c = code_of(lambda: C.stub.ListJobs(C.service_pb2.ListJobsRequest(page_size=size)))
        check(c == GRPC.StatusCode.INVALID_ARGUMENT or size > 0, f"page_size {size}: {c}")
    C.wait_state(blue, "SUCCEEDED")


def test_watch_and_events_resume():
    name = C.create(C.spec(output="watch", max_steps=8, every=2)).name
    states = [Job.State.Name(j.state) for j in C.stub.WatchJob(
        C.service_pb2.WatchJobRequest(name=name), timeout=120)]
    check(states[-1] == "SUCCEEDED", f"watch ended in {states[-1]}")
    check("RUNNING" in states, f"watch never saw RUNNING: {states}")
    all_events = C.events(name)
    seqs = [e.sequence for e in all_events]
    check(seqs == list(range(1, len(seqs) + 1)), "sequences are not 1..n without gaps")
    k = len(seqs) // 2
    streamed = [e for e in C.stub.StreamJobEvents(C.service_pb2.StreamJobEventsRequest(
        name=name, since_sequence=k), timeout=60) if e.type != "HEARTBEAT"]
    check([e.sequence for e in streamed] == seqs[k:], "stream from k: gap or duplicate")
    paged = C.events(name, page_size=3)
    check([e.sequence for e in paged] == seqs, "ListJobEvents pages differ from the log")
    types = {e.type for e in all_events}
    for t in ("JOB_CREATED", "STEP_METRICS", "CHECKPOINT_COMMITTED", "EXPORT_COMPLETED"):
        check(t in types, f"no {t} event")
    m = next(e for e in all_events if e.type == "STEP_METRICS").metrics
    for key in ("step", "loss", "lr", "grad_norm", "tokens_per_second", "padding_waste",
                "eta_seconds"):
        check(key in m, f"STEP_METRICS lacks {key}")
    cps = C.stub.ListCheckpoints(C.service_pb2.ListCheckpointsRequest(name=name)).checkpoints
    check(len(cps) >= 1 and all(len(c.manifest_sha256) == 64 for c in cps), "checkpoints")
    # Only checkpoints that still exist: keep_last_n pruned the others.
    committed = sum(e.type == "CHECKPOINT_COMMITTED" for e in all_events)
    pruned = sum(e.type == "CHECKPOINT_PRUNED" for e in all_events)
    check(pruned >= 1 and len(cps) == committed - pruned and
          all(os.path.isdir(c.path) for c in cps),
          f"checkpoints listed {len(cps)}, committed {committed}, pruned {pruned}")
    # `deltatune export` turns the last checkpoint into the folder the job itself exported.
    out = D.path("outputs", "watch-reexport")
    rc, stdout, err = cli("export", name, "--out", out)
    check(rc == 0 and f"exported step {cps[-1].step} of {name}" in stdout, f"export: {rc} {err}")
    final = C.get(name).result_model
    for f in ("model.safetensors", "config.json"):
        same = open(os.path.join(final, f), "rb").read() == open(os.path.join(out, f), "rb").read()
        check(same, f"re-exported {f} differs from the job's export")
    rc, _, err = cli("export", name, "--step", "99999")
    check(rc == 3 and f"{name} has no checkpoint of step 99999 (steps " in err, f"{rc} {err}")


def test_pause_resume_cancel():
    # One job at a time: a long job holds the slot, so the next ones stay QUEUED.
    long = C.create(C.spec(output="long", max_steps=400, every=5)).name
    C.wait(long, lambda j: j.progress.step >= 2, what="step 2")
    # `deltatune events` of a running job prints what exists and returns at once (it used to
    # wait for the event stream's first heartbeat, 15 s).
    started = time.monotonic()
    rc, out, err = cli("events", long)
    check(rc == 0 and "JOB_CREATED" in out and time.monotonic() - started < 5,
          f"events of a running job: exit {rc} after {time.monotonic() - started:.1f} s {err}")
    queued = C.create(C.spec(output="q", max_steps=2)).name
    check(C.state(queued) == "QUEUED" and C.get(queued).queue_position == 1, "queue position")
    C.stub.CancelJob(C.service_pb2.CancelJobRequest(name=queued))
    check(C.state(queued) == "CANCELLED", "cancel in QUEUED")
    C.stub.PauseJob(C.service_pb2.PauseJobRequest(name=long))
    paused = C.wait_state(long, "PAUSED", timeout=60)
    step = paused.progress.step
    check(paused.latest_checkpoint, "pause did not checkpoint")
    C.stub.ResumeJob(C.service_pb2.ResumeJobRequest(name=long))
    C.wait(long, lambda j: j.progress.step > step + 2, what="progress after resume")
    resumed = [e for e in C.events(long) if e.type == "RESUMED"]
    check(resumed and int(resumed[-1].metrics.get("step", -1)) == step,
          f"did not resume from step {step}: {resumed}")
    C.stub.CancelJob(C.service_pb2.CancelJobRequest(name=long))
    C.wait_state(long, "CANCELLED", timeout=30)
    check(not D.rank_pids(long.split("/")[1]), "cancel left rank processes")
    # Cancel while PAUSED.
    p = C.create(C.spec(output="p", max_steps=400, every=5)).name
    C.wait(p, lambda j: j.progress.step >= 1, what="step 1")
    C.stub.PauseJob(C.service_pb2.PauseJobRequest(name=p))
    C.wait_state(p, "PAUSED", timeout=60)
    C.stub.CancelJob(C.service_pb2.CancelJobRequest(name=p))
    check(C.state(p) == "CANCELLED", "cancel in PAUSED")
    c = code_of(lambda: C.stub.ResumeJob(C.service_pb2.ResumeJobRequest(name=p)))
    check(c == GRPC.StatusCode.FAILED_PRECONDITION, f"resume of CANCELLED: {c}")
    C.stub.DeleteJob(C.service_pb2.DeleteJobRequest(name=p))
    check(code_of(lambda: C.get(p)) == GRPC.StatusCode.NOT_FOUND, "deleted job still found")


def test_hostile_requests():
    check(code_of(lambda: C.get("jobs/does-not-exist")) == GRPC.StatusCode.NOT_FOUND, "unknown id")
    bad = C.spec(model="../../etc", output="x")
    check(code_of(lambda: C.create(bad)) == GRPC.StatusCode.INVALID_ARGUMENT, "path escape")
    os.symlink("/etc", D.path("models", "escape"))
    bad = C.spec(model="escape", output="x")
    check(code_of(lambda: C.create(bad)) == GRPC.StatusCode.INVALID_ARGUMENT, "symlink escape")
    huge = C.spec(output="x")
    huge.display_name = "x" * (5 << 20)
    check(code_of(lambda: C.create(huge)) == GRPC.StatusCode.RESOURCE_EXHAUSTED, "oversized")
    zero = C.spec(output="x", max_steps=0)
    check(code_of(lambda: C.create(zero)) == GRPC.StatusCode.INVALID_ARGUMENT, "max_steps 0")
    os.makedirs(D.path("models", "qwen27b"))
    import shutil
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                             "models", "qwen3.8-27b.json"), D.path("models", "qwen27b", "config.json"))
    big = C.spec(model="qwen27b", output="big", tokens_per_batch=8192)
    big.resources.gpus, big.resources.cpu_ranks = 1, 0
    try:
        C.create(big)
        check(False, "a 27B job on one GPU must be refused")
    except GRPC.RpcError as e:
        check(e.code() == GRPC.StatusCode.RESOURCE_EXHAUSTED and "MEMORY_PLAN" in e.details()
              and "it fits from 4 GPUs" in e.details(), f"memory plan refusal: {e.details()}")
    big.resources.gpus = 4  # fits, but this daemon has no GPUs (scheduler.gpus: 0): refused
    try:
        C.create(big, validate_only=True)
        check(False, "a GPU job must not be accepted by a daemon without GPUs")
    except GRPC.RpcError as e:
        check(e.code() == GRPC.StatusCode.FAILED_PRECONDITION and
              "GPUS_UNAVAILABLE" in e.details() and "exceeds the 0 GPU(s)" in e.details(),
              f"GPU job: {e.code()} {e.details()}")
    check(C.stub.ListJobs(C.service_pb2.ListJobsRequest()) is not None, "daemon still serves")


def test_cli_lifecycle():
    spec_path = D.path("job.yaml")
    with open(spec_path, "w") as f:
        f.write("model: tiny\noutput_dir: cli\ndata:\n  train_files: [train.jsonl]\n"
                "  format: tokenized\nhyperparameters:\n  max_steps: 4\n  tokens_per_batch: 256\n"
                "  learning_rate: 0.003\nresources:\n  gpus: 0\n  cpu_ranks: 1\n"
                "labels: {team: cli, stage: test}\n")
    rc, out, err = cli("submit", spec_path, "--validate-only")
    check(rc == 0 and out.startswith(f"valid: {spec_path}"), f"--validate-only: {rc} {out!r} {err}")
    rc, out, err = cli("submit", spec_path, "--watch", "--output", "json")
    check(rc == 0, f"submit --watch exit {rc}: {err}")
    job = json.loads(out)
    check(job["state"] == "SUCCEEDED", f"final state {job['state']}")
    name = job["name"]
    for args in (("get", name), ("list",), ("events", name), ("checkpoints", name)):
        rc, out, err = cli(*args)
        check(rc == 0 and out, f"{args}: exit {rc} {err}")
    # Exit statuses by kind: 3 no such job (get and watch alike), 2 a bad job file.
    rc, _, err = cli("get", "jobs/nope")
    check(rc == 3 and "NOT_FOUND" in err, f"get unknown: {rc} {err}")
    rc, _, err = cli("watch", "jobs/nope")
    check(rc == 3 and "NOT_FOUND" in err, f"watch unknown: {rc} {err}")
    rc, _, err = cli("events", "jobs/nope", "--follow")
    check(rc == 3 and "NOT_FOUND" in err, f"events --follow unknown: {rc} {err}")
    rc, out, err = cli("events", name, "--follow")  # a finished job: its events, then exit 0
    check(rc == 0 and "SUCCEEDED" in out, f"events --follow of a finished job: {rc} {err}")
    # Repeated --label filters all apply; --state in any case.
    rc, out, err = cli("list", "--state", "succeeded", "--label", "team=cli", "--label",
                       "stage=test", "--output", "json")
    names = [j["name"] for j in json.loads(out).get("jobs", [])] if rc == 0 else []
    check(names == [name], f"list by state and two labels: {rc} {names} {err}")
    rc, out, err = cli("list", "--label", "team=cli", "--label", "stage=other", "--output", "json")
    check(rc == 0 and not json.loads(out).get("jobs"), f"a second label must narrow: {out} {err}")
    # delete: a finished job leaves the daemon; get then says NOT_FOUND.
    with open(spec_path, "w") as f:
        f.write("model: tiny\noutput_dir: cli-delete\ndata:\n  train_files: [train.jsonl]\n"
                "  format: tokenized\nhyperparameters:\n  max_steps: 1\n  tokens_per_batch: 256\n"
                "resources:\n  gpus: 0\n  cpu_ranks: 1\n")
    rc, out, err = cli("submit", spec_path, "--watch", "--output", "json")
    check(rc == 0, f"submit the job to delete: {rc} {err}")
    gone = json.loads(out)["name"]
    with urllib.request.urlopen(D.http("/metrics")) as r:
        check(f'job_id="{gone}"' in r.read().decode(), f"{gone} has no series before it is deleted")
    rc, out, err = cli("delete", gone)
    check(rc == 0 and f"deleted {gone}" in out, f"delete: {rc} {out} {err}")
    rc, _, err = cli("get", gone)
    check(rc == 3 and "NOT_FOUND" in err, f"get deleted: {rc} {err}")
    # Its folder stays claimed: a new job there names it in resume_from, and continues its run.
    rc, _, err = cli("submit", spec_path, "--validate-only")
    check(rc == 5 and f"resume_from: {gone}" in err, f"the deleted job's folder: {rc} {err}")
    with open(spec_path) as f:
        text = f.read().replace("max_steps: 1", "max_steps: 2")
    with open(spec_path, "w") as f:
        f.write(text + f"resume_from: {gone}\n")
    rc, out, err = cli("submit", spec_path, "--watch", "--output", "json")
    resumed = [e for e in C.events(json.loads(out)["name"]) if e.type == "RESUMED"] if rc == 0 else []
    check(resumed, f"continuing a deleted job's run: {rc} {err}")
    with urllib.request.urlopen(D.http("/metrics")) as r:  # its series leave with it
        check(f'job_id="{gone}"' not in r.read().decode(), f"{gone}'s series outlive it")
    with open(spec_path, "w") as f:
        f.write("model: tiny\nhyperparamters:\n  max_steps: 4\n")
    rc, _, err = cli("submit", spec_path)
    check(rc == 2 and "hyperparamters" in err, f"unknown key not named: {rc} {err}")


def test_admin_http():
    with urllib.request.urlopen(D.http("/healthz")) as r:
        check(r.status == 200, "healthz")
    with urllib.request.urlopen(D.http("/metrics")) as r:
        text = r.read().decode()
    for name in ("deltatune_job_learning_rate{", "deltatune_job_grad_norm{",
                 "deltatune_job_step_seconds{", "deltatune_job_total_steps{",
                 "deltatune_job_eta_seconds{", "deltatune_job_eval_loss{",
                 "deltatune_jobs{state=\"SUCCEEDED\"}", "deltatune_job_step{",
                 "deltatune_job_tokens_total{", "deltatune_job_loss{", "deltatune_build_info{",
                 "deltatune_checkpoint_duration_seconds_bucket{", "deltatune_event_stream_subscribers"):
        check(name in text, f"/metrics lacks {name}")
    with urllib.request.urlopen(D.http("/v1/jobs?page_size=2")) as r:
        body = json.loads(r.read())
    check(len(body["jobs"]) == 2 and body.get("nextPageToken"), f"/v1/jobs paging: {body}")
    name = body["jobs"][0]["name"]
    # Buckets as Prometheus prints them; the job label is job_id (Prometheus owns `job`).
    check('le="0.1"' in text and "{job=" not in text and '{job_id="jobs/' in text,
          "bucket or label format")
    with urllib.request.urlopen(D.http("/v1/jobs?label=nobody:here")) as r:
        check(json.loads(r.read()) == {"jobs": [], "nextPageToken": ""}, "empty /v1/jobs")
    with urllib.request.urlopen(D.http("/v1/jobs?label=team%3Dlora&page_size=50")) as r:
        labelled = json.loads(r.read())["jobs"]
    check(len(labelled) == 1 and labelled[0]["spec"]["labels"] == {"team": "lora"},
          f"?label=: {labelled}")
    check('deltatune_job_last_step_timestamp_seconds{job_id="' + name + '"} 0\n' not in text,
          "last step timestamp never set")
    with urllib.request.urlopen(D.http("/v1/" + name)) as r:
        check(json.loads(r.read())["name"] == name, "/v1/jobs/{id}")
    try:
        urllib.request.urlopen(D.http("/v1/jobs/nope"))
        check(False, "unknown job must be 404")
    except urllib.error.HTTPError as e:
        check(e.code == 404, f"unknown job: {e.code}")
    # Every series the Grafana dashboard (deploy/grafana) plots is one this daemon exports.
    with open(os.path.join(SOURCE, "deploy/grafana/deltatune.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    exported = set(re.findall(r"^(?:# TYPE )?(deltatune_\w+)", text, re.M))  # declared or sampled
    named = {n for e in exprs for n in re.findall(r"deltatune_\w+", e)}
    check(len(named) >= 10 and named <= exported,
          f"dashboard series not exported: {sorted(named - exported)}")
    # The per-step history a poller plots, and its continuation after a given step.
    with urllib.request.urlopen(D.http("/v1/jobs?state=succeeded&page_size=1")) as r:  # any case
        done = json.loads(r.read())["jobs"][0]["name"]
    with urllib.request.urlopen(D.http("/v1/" + done + "/metrics")) as r:
        hist = json.loads(r.read())
    steps = [int(x["step"]) for x in hist["steps"]]
    check(len(steps) >= 2 and steps == sorted(set(steps)), f"history steps: {steps}")
    check(all("loss" in x and "lr" in x and x["time"] > 0 for x in hist["steps"]),
          f"history rows: {hist['steps'][:1]}")
    with urllib.request.urlopen(D.http(f"/v1/{done}/metrics?since_step={steps[-2]}")) as r:
        tail = json.loads(r.read())["steps"]
    check([int(x["step"]) for x in tail] == [steps[-1]], f"since_step: {tail}")
    # The job's scalars as TensorBoard's own reader sees them: the losses its events reported.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    with urllib.request.urlopen(D.http("/v1/" + done)) as r:
        out = json.loads(r.read())["spec"]["outputDir"]
    out = out if os.path.isabs(out) else os.path.join(D.root, "outputs", out)
    ea = EventAccumulator(os.path.join(out, "tensorboard"))
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    check({"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_second"} <= tags,
          f"tensorboard tags: {sorted(tags)}")
    board = {e.step: e.value for e in ea.Scalars("train/loss")}
    want = {int(x["step"]): x["loss"] for x in hist["steps"]}
    check(set(board) == set(want) and
          all(abs(board[k] - want[k]) <= 1e-6 * abs(want[k]) for k in want),
          f"tensorboard losses {board} vs events {want}")
    for path, code in (("/v1/jobs/nope/metrics", 404), (f"/v1/{done}/metrics?since_step=x", 400)):
        try:
            urllib.request.urlopen(D.http(path))
            check(False, f"{path} must fail")
        except urllib.error.HTTPError as e:
            check(e.code == code, f"{path}: {e.code}")


def test_sigterm_checkpoints_and_restart_resumes():
    name = C.create(C.spec(output="term", max_steps=400, every=1000)).name
    C.wait(name, lambda j: j.progress.step >= 3, what="step 3")
    check(D.stop() == 0, "deltatuned did not exit 0 on SIGTERM")
    D.start()
    job = C.get(name)
    check(job.latest_checkpoint, "SIGTERM did not checkpoint the running job")
    step = int(job.latest_checkpoint.rstrip("/").split("step-")[-1])
    check(step >= 3, f"checkpoint at step {step}")
    C.wait(name, lambda j: j.progress.step > step, what="progress after restart")
    C.stub.CancelJob(C.service_pb2.CancelJobRequest(name=name))
    C.wait_state(name, "CANCELLED", timeout=30)


def test_lora_job():
    """A LoRA job through the daemon: paused, resumed, exported as a PEFT folder that
    `deltatune step --adapter` reads; its checkpoints hold only the adapter."""
    spec = C.spec(output="lora", max_steps=60, every=5, labels={"team": "lora"})
    spec.adapter.type, spec.adapter.rank, spec.adapter.alpha = "lora", 4, 8
    spec.adapter.target_modules.extend(["q_proj", "v_proj", "in_proj_qkv", "down_proj"])
    name = C.create(spec).name
    C.wait(name, lambda j: j.progress.step >= 6, what="step 6")
    C.stub.PauseJob(C.service_pb2.PauseJobRequest(name=name))
    paused = C.wait_state(name, "PAUSED", timeout=60)
    C.stub.ResumeJob(C.service_pb2.ResumeJobRequest(name=name))
    job = C.wait_state(name, "SUCCEEDED", timeout=120)
    resumed = [e for e in C.events(name) if e.type == "RESUMED"]
    check(resumed and int(resumed[-1].metrics.get("step", -1)) == paused.progress.step,
          f"did not resume from step {paused.progress.step}")
    files = sorted(os.listdir(job.result_model))
    check("adapter_config.json" in files and "adapter_model.safetensors" in files
          and "model.safetensors" not in files, f"export {files}")
    ckpt = job.latest_checkpoint
    size = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))
    model = os.path.getsize(D.path("models", "tiny", "model.safetensors"))
    check(size < model / 3, f"checkpoint {size} bytes, the model {model}")
    batch = D.path("lora-batch.json")
    with open(batch, "w") as f:
        json.dump({"documents": [{"input_ids": list(range(3, 40)), "labels": list(range(3, 40))}]}, f)
    r = subprocess.run([CLI, "step", "--model", D.path("models", "tiny"), "--batch", batch,
                        "--adapter", job.result_model], capture_output=True, text=True)
    check(r.returncode == 0 and json.loads(r.stdout)["loss"] > 0, f"step --adapter: {r.stderr}")
    # `deltatune export` of a LoRA job's checkpoints: the newest is the job's own PEFT folder,
    # byte for byte; an earlier one is another adapter; --merged is a whole model whose step
    # loss equals the base with the adapter.
    out = D.path("outputs", "lora-reexport")
    rc, stdout, err = cli("export", name, "--out", out)
    check(rc == 0 and "(LoRA, PEFT)" in stdout, f"export: {rc} {stdout} {err}")
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        same = open(os.path.join(job.result_model, f), "rb").read() == \
            open(os.path.join(out, f), "rb").read()
        check(same, f"re-exported {f} differs from the job's export")
    cps = C.stub.ListCheckpoints(C.service_pb2.ListCheckpointsRequest(name=name)).checkpoints
    rc, _, err = cli("export", name, "--step", str(cps[0].step), "--out", out + "-early")
    early = open(os.path.join(out + "-early", "adapter_model.safetensors"), "rb").read()
    check(rc == 0 and early != open(os.path.join(out, "adapter_model.safetensors"), "rb").read(),
          f"export --step {cps[0].step}: {rc} {err}")
    rc, stdout, err = cli("export", name, "--merged", "--out", out + "-merged")
    check(rc == 0 and "(LoRA merged)" in stdout, f"export --merged: {rc} {err}")
    merged = subprocess.run([CLI, "step", "--model", out + "-merged", "--batch", batch],
                            capture_output=True, text=True)
    want, got = json.loads(r.stdout)["loss"], json.loads(merged.stdout or "{}").get("loss")
    check(merged.returncode == 0 and got is not None and abs(got - want) <= 1e-5 * abs(want),
          f"merged loss {got} vs base + adapter {want}: {merged.stderr}")
    rc, _, err = cli("export", "jobs/" + "0" * 12, "--merged")
    check(rc == 3, f"export of no job: {rc} {err}")


try:
    run_tests([
        ("create, get, idempotent request_id", test_create_get_idempotent),
        ("list pagination and filters", test_list_pagination_and_filters),
        ("watch, events resumed from a sequence", test_watch_and_events_resume),
        ("pause, resume, cancel in each state, delete", test_pause_resume_cancel),
        ("hostile requests get precise codes", test_hostile_requests),
        ("C++ CLI lifecycle", test_cli_lifecycle),
        ("a LoRA job: pause, resume, PEFT export, CLI export", test_lora_job),
        ("admin HTTP: metrics, probes, JSON", test_admin_http),
        ("SIGTERM checkpoints; restart resumes", test_sigterm_checkpoints_and_restart_resumes),
    ])
finally:
    D.stop()
