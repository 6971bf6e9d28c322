#!/usr/bin/env python3
"""A real Prometheus server (Debian's `prometheus`, on loopback, with a generated config) scrapes a
deltatuned while it trains a job; the test asserts on PromQL results over Prometheus's HTTP API:
the job's series under Prometheus's own `job` label (deltatune's is `job_id`, so nothing is
renamed to exported_job), progress, losses, checkpoint age, the windowed tokens/s dropping to 0
once the job is done, the gRPC server's call counters by method and code, and the process
series. Also `promtool check metrics` on the exposition text. Exits 77 (skipped) without the
prometheus binaries (scripts/install-deps.sh installs them)."""
import json
import math
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from harness import check, free_port, run_tests, started_daemon

if not shutil.which("prometheus") or not shutil.which("promtool"):
    print("SKIP: prometheus/promtool not installed (scripts/install-deps.sh)")
    sys.exit(77)

D, C = started_daemon()
PROM_PORT = free_port()
PROM = None
JOB = None


def start_prometheus():
    global PROM
    config = D.path("prometheus.yml")
    with open(config, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: deltatune
    static_configs:
      - targets: ["127.0.0.1:{D.http_port}"]
""")
    PROM = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={D.path('tsdb')}",
         f"--web.listen-address=127.0.0.1:{PROM_PORT}"],
        stdout=open(D.path("prometheus.log"), "w"), stderr=subprocess.STDOUT)


def query(expr):
    """The instant vector of a PromQL expression: [(labels, value)]."""
    url = f"http://127.0.0.1:{PROM_PORT}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    check(body["status"] == "success", f"{expr}: {body}")
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def one(expr):
    got = query(expr)
    check(len(got) == 1, f"{expr}: want one series, got {got}")
    return got[0][1]


def wait_for(expr, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if query(expr):
                return
        except OSError:
            pass  # Prometheus still starting
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what} ({expr}); prometheus log: "
                         + open(D.path("prometheus.log")).read()[-2000:])


def test_scrape_while_training():
    global JOB
    start_prometheus()
    wait_for('up{job="deltatune"} == 1', "the first scrape")
    spec = C.spec(max_steps=40, every=10, eval_files=["eval.jsonl"], tokens_per_batch=256)
    JOB = C.create(spec).name
    sel = f'job_id="{JOB}"'
    wait_for(f"deltatune_job_tokens_per_second{{{sel}}} > 0", "tokens/s while RUNNING", 120)
    C.wait_state(JOB, "SUCCEEDED", timeout=300)
    # A scrape or two after the end, every series shows the finished job.
    wait_for(f"deltatune_job_step{{{sel}}} == 40 and deltatune_job_tokens_per_second{{{sel}}} == 0",
             "the final step and tokens/s back to 0")


def test_job_series():
    sel = f'job_id="{JOB}"'
    losses = C.step_losses(JOB)
    check(abs(one(f"deltatune_job_loss{{{sel}}}") - losses[40][-1]) < 1e-6,
          "deltatune_job_loss is the last step's loss")
    evals = [e.metrics["eval_loss"] for e in C.events(JOB, type_="EVAL_METRICS")]
    got = one(f"deltatune_job_eval_loss{{{sel}}}")
    check(evals and abs(got - evals[-1]) < 1e-6, f"eval loss {got} vs the events' {evals}")
    check(one(f"deltatune_job_total_steps{{{sel}}}") == 40, "total steps")
    commits = [int(e.metrics["step"]) for e in C.events(JOB, type_="CHECKPOINT_COMMITTED")]
    got = one(f"deltatune_job_last_checkpoint_step{{{sel}}}")
    check(commits and got == commits[-1], f"newest checkpoint {got}, committed {commits}")
    age = one(f"deltatune_job_last_checkpoint_age_seconds{{{sel}}}")
    check(0 <= age < 300, f"checkpoint age {age}")
    check(one(f"max_over_time(deltatune_job_tokens_per_second{{{sel}}}[10m])") > 0,
          "tokens/s was positive while running")
    check(one(f"deltatune_job_step_seconds{{{sel}}}") > 0, "step seconds")
    check(one(f"deltatune_job_learning_rate{{{sel}}}") > 0, "learning rate")
    check(math.isnan(one(f"deltatune_job_mfu{{{sel}}}")), "no MFU on CPU ranks")
    now = time.time()
    check(now - 600 < one(f"deltatune_job_last_step_timestamp_seconds{{{sel}}}") <= now + 1,
          "last step timestamp")
    # Prometheus's own `job` label is the scrape job; deltatune's label is job_id.
    labels = query(f"deltatune_job_step{{{sel}}}")[0][0]
    check(labels.get("job") == "deltatune" and "exported_job" not in labels, f"labels {labels}")
    check(one('deltatune_jobs{state="SUCCEEDED"}') >= 1, "jobs by state")
    check(one("deltatune_queue_length") == 0 and one("deltatune_gpus_free") == 0, "queue, GPUs")


def test_grpc_and_process_series():
    try:
        C.get("jobs/does-not-exist")
    except C.grpc.RpcError:
        pass
    wait_for('grpc_server_handled_total{grpc_method="GetJob",grpc_code="NotFound"} >= 1',
             "the failed GetJob counted")
    check(one('sum(grpc_server_handled_total{grpc_method="CreateJob",grpc_code="OK"})') >= 1,
          "CreateJob counted")
    check(one('sum(grpc_server_started_total{grpc_service="deltatune.v1.FineTuningService"})')
          >= one('sum(grpc_server_handled_total{grpc_service="deltatune.v1.FineTuningService"})'),
          "started >= handled")
    check(one('histogram_quantile(0.5, sum by (le) (rate('
              'grpc_server_handling_seconds_bucket{grpc_method="GetJob"}[1m])))') >= 0,
          "handling-time histogram")
    check(one('process_resident_memory_bytes{job="deltatune"}') > 1e6, "resident memory")
    start = one('process_start_time_seconds{job="deltatune"}')
    check(time.time() - 3600 < start < time.time(), f"process start {start}")
    check(one('process_open_fds{job="deltatune"}') > 3, "open fds")


def test_promtool():
    with urllib.request.urlopen(D.http("/metrics")) as r:
        text = r.read()
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True)
    check(p.returncode == 0, f"promtool: {p.stdout.decode()} {p.stderr.decode()}")


try:
    run_tests([
        ("a real Prometheus scrapes the daemon while a job trains", test_scrape_while_training),
        ("the job's series over PromQL", test_job_series),
        ("gRPC server and process series over PromQL", test_grpc_and_process_series),
        ("promtool check metrics", test_promtool),
    ])
finally:
    if PROM:
        PROM.terminate()
        PROM.wait(timeout=10)
    D.stop()
