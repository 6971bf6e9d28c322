#!/usr/bin/env python3
"""How long a job trains and what it keeps, through the CLI against a real deltatuned and ranks:
num_epochs (the steps derived from the packed plan, shown once the data is loaded), warmup_ratio,
early stopping (the best checkpoint kept past keep_last_n, marked in `checkpoints`, exported by
the job and by `export --best`), the data summary in `get`, `watch` and /ui when documents were
cut, and `get --output yaml` resubmitting the job."""
import json
import os
import subprocess
import urllib.request

from harness import CLI, check, make_tokenized_data, run_tests, started_daemon

D, C = started_daemon()


def cli(*args):
    env = dict(os.environ, DELTATUNE_ADDRESS=f"127.0.0.1:{D.port}")
    r = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=300)
    return r.returncode, r.stdout, r.stderr


def write_job(path, output, extra=""):
    with open(path, "w") as f:
        f.write(f"model: tiny\noutput_dir: {output}\ndata:\n  train_files: [long.jsonl]\n"
                "  eval_files: [eval.jsonl]\n  format: tokenized\n"
                "hyperparameters:\n  num_epochs: 2\n  warmup_ratio: 0.1\n  tokens_per_batch: 256\n"
                "  learning_rate: 0.003\nresources:\n  gpus: 0\n  cpu_ranks: 1\n" + extra)


def long_documents():
    """Train data with documents longer than a batch (split by default: tokenized data)."""
    path = D.path("data", "long.jsonl")
    make_tokenized_data(path, 40, seed=5)
    with open(path, "a") as f:
        for i in range(3):
            ids = [(7 * i + j) % 512 for j in range(300 + i)]
            f.write(json.dumps({"input_ids": ids, "labels": ids}) + "\n")


def test_epochs_and_data_summary():
    long_documents()
    spec = D.path("epochs.yaml")
    write_job(spec, "epochs")
    rc, out, err = cli("submit", spec, "--watch")  # not a terminal: one line per change
    check(rc == 0, f"submit --watch: {rc} {err}")
    check("data: 43 documents" in out and "steps per epoch" in out and
          "3 longer than tokens_per_batch split" in out, f"watch said no data line: {out}")
    name = next(line.split()[0] for line in out.splitlines() if line.startswith("jobs/"))
    job = C.get(name)
    per_epoch = job.data_summary.steps_per_epoch
    check(per_epoch > 0 and job.progress.total_steps == 2 * per_epoch and
          job.progress.step == job.progress.total_steps,
          f"2 epochs of {per_epoch} steps: ran {job.progress.step}/{job.progress.total_steps}")
    check(job.data_summary.warmup_steps == -(-job.progress.total_steps // 10),
          f"warmup {job.data_summary.warmup_steps} of {job.progress.total_steps}")
    rc, out, err = cli("get", name)
    check(rc == 0 and "3 longer than tokens_per_batch split" in out, f"get: {out} {err}")
    with urllib.request.urlopen(D.http(f"/v1/{name}")) as r:
        shown = json.loads(r.read())
    check(shown.get("dataSummary", {}).get("overlongDocuments") == "3", f"/api job: {shown}")


def test_early_stopping_and_export_best():
    spec = D.path("stop.yaml")
    # min_delta so large that only the first evaluation is ever the best: patience 2 stops
    # after the evaluations of steps 4 and 6.
    write_job(spec, "stop", "eval_every_n_steps: 2\nearly_stopping: {patience: 2, min_delta: 100}\n"
              "checkpoint: {every_n_steps: 1, keep_last_n: 1}\n")
    rc, out, err = cli("submit", spec, "--watch", "--output", "json")
    check(rc == 0, f"submit: {rc} {err}")
    job = json.loads(out)
    name = job["name"]
    check(job["progress"]["step"] == "6" and job["bestStep"] == "2", f"stopped at {job}")
    check(any(e.type == "EARLY_STOPPED" for e in C.events(name)), "no EARLY_STOPPED event")
    rc, out, err = cli("checkpoints", name)
    lines = out.splitlines()
    check(rc == 0 and len(lines) == 2 and "(best)" in lines[0] and "step 2 " in lines[0],
          f"checkpoints: the best and the newest: {out} {err}")
    best = D.path("outputs", "stop-best")
    rc, out, err = cli("export", name, "--best", "--out", best)
    check(rc == 0 and "exported step 2" in out, f"export --best: {rc} {out} {err}")
    same = open(os.path.join(best, "model.safetensors"), "rb").read() == \
        open(os.path.join(job["resultModel"], "model.safetensors"), "rb").read()
    check(same, "the job's export is not the best checkpoint's weights")
    rc, _, err = cli("export", name, "--best", "--step", "6")
    check(rc == 2, f"--best with --step: {rc} {err}")
    rc, _, err = cli("export", name.replace("jobs/", ""), "--best", "--out", best + "2")
    check(rc == 0, f"export --best by id: {rc} {err}")


def test_get_yaml_resubmits():
    rc, out, err = cli("list", "--output", "json")
    name = json.loads(out)["jobs"][0]["name"]
    rc, text, err = cli("get", name, "--output", "yaml")
    check(rc == 0 and "num_epochs: 2" in text and "beta2: 0.95" in text, f"get yaml: {text} {err}")
    again = D.path("again.yaml")
    with open(again, "w") as f:  # a new output folder: the old one belongs to the first job
        f.write(text.replace(C.get(name).spec.output_dir, D.path("outputs", "again")))
    rc, out, err = cli("submit", again, "--validate-only")
    check(rc == 0 and out.startswith("valid:"), f"resubmitting get's yaml: {rc} {out} {err}")


def test_untrained_job_has_no_last_step_time():
    path = D.path("data", "masked.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"input_ids": [1, 2, 3], "labels": [-100, -100, -100]}) + "\n")
    spec = C.spec(train="masked.jsonl", output="masked", max_steps=2)
    name = C.create(spec).name
    C.wait_state(name, "FAILED")
    with urllib.request.urlopen(D.http("/metrics")) as r:
        text = r.read().decode()
    line = next(l for l in text.splitlines()
                if l.startswith(f'deltatune_job_last_step_timestamp_seconds{{job_id="{name}"}}'))
    check(line.endswith(" NaN"), f"a job without a step: {line}")
    # States a job can be in, no more: VALIDATING left the proto (CreateJob validates first).
    check('deltatune_jobs{state="QUEUED"}' in text and "VALIDATING" not in text,
          "jobs by state")


try:
    run_tests([
        ("num_epochs, warmup_ratio and the data summary", test_epochs_and_data_summary),
        ("early stopping keeps and exports the best checkpoint",
         test_early_stopping_and_export_best),
        ("get --output yaml resubmits the job", test_get_yaml_resubmits),
        ("a job that never trained has no last step time", test_untrained_job_has_no_last_step_time),
    ])
finally:
    D.stop()
