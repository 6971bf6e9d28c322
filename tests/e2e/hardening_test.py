#!/usr/bin/env python3
"""Attacks on a real deltatuned, each one that broke the daemon once, kept here so it stays fixed.

  - A path component over 255 bytes after a symlink to "/" once skipped symlink resolution: the
    rank read /etc/shadow. Now any path that cannot be fully resolved is refused.
  - A queued job's data file swapped for a symlink to a file outside the roots, and an output
    folder created as a symlink after submission: the rank opens every path beneath its root
    descriptor (openat2 RESOLVE_BENEATH), so both fail with PATH_NOT_ALLOWED and nothing outside
    the roots is read or written.
  - A second job naming another job's output_dir once resumed from its checkpoints and overwrote
    its export: now refused (OUTPUT_DIR_IN_USE) unless resume_from names the owner.
  - A 200 MB line once killed the rank (std::bad_alloc, retried to MAX_RESTARTS_EXCEEDED); a disk
    full once read as OUT_OF_MEMORY and was retried three times.
  - A second daemon on the same ports once started and took half the requests (SO_REUSEPORT).
  - With auth on, /metrics without the token once listed every job and its loss.
  - Garbage, invalid UTF-8 and 10,000-deep requests were UNIMPLEMENTED with no message.
"""
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request

from harness import Client, Daemon, check, load_stubs, make_tokenized_data, run_tests

STUBS = load_stubs(tempfile.mkdtemp(prefix="deltatune-stubs-"))
D = Daemon()
D.init_model()
make_tokenized_data(D.path("data", "train.jsonl"), 200, seed=3)
# Valid training data outside every root: a job that reads it would succeed, so only the sandbox
# can make these tests pass.
os.makedirs(D.path("secret"))
make_tokenized_data(D.path("secret", "stolen.jsonl"), 200, seed=4)
D.start()
C = Client(D.port, STUBS)
grpc = C.grpc


def error_info(e):
    """The google.rpc.ErrorInfo in a failed call's status details."""
    from google.rpc import status_pb2
    raw = dict(e.trailing_metadata() or ()).get("grpc-status-details-bin")
    check(raw is not None, f"no status details on {e.code()} {e.details()}")
    status = status_pb2.Status.FromString(raw)
    info = status_pb2.ErrorInfo()
    check(len(status.details) == 1 and status.details[0].Unpack(info), "no ErrorInfo")
    return info


def refused(spec, code, text):
    try:
        C.create(spec)
    except grpc.RpcError as e:
        check(e.code() == code, f"code {e.code()} ({e.details()}), want {code}")
        check(text in e.details(), f"'{text}' not in '{e.details()}'")
        # The reason the message starts with travels as ErrorInfo too.
        reason = e.details().split(":")[0]
        if reason.isupper():
            check(error_info(e).reason == reason, f"ErrorInfo {error_info(e)} for {e.details()}")
        return e.details()
    raise AssertionError(f"accepted; want {code} {text}")


def failed_with(name, reason):
    job = C.wait_state(name, "FAILED", "SUCCEEDED", timeout=120)
    check(job.state == C.job_pb2.Job.FAILED, f"{name} {C.job_pb2.Job.State.Name(job.state)}")
    check(job.state_reason == reason, f"reason {job.state_reason}: {job.error_message}")
    return job


def test_overlong_component_after_symlink_is_refused():
    os.symlink("/", D.path("data", "rootlink"))
    os.symlink("/", D.path("models", "rootlink"))
    os.symlink("/", D.path("outputs", "rootlink"))
    long = "rootlink/" + "x" * 300 + "/.."
    bad = C.spec(train=long + "/etc/passwd")
    msg = refused(bad, grpc.StatusCode.INVALID_ARGUMENT, "PATH_NOT_ALLOWED: data.train_files[0]")
    check("/etc" not in msg.replace(long + "/etc/passwd", ""), f"echoes a resolved path: {msg}")
    refused(C.spec(model=long + "/tmp"), grpc.StatusCode.INVALID_ARGUMENT,
            "PATH_NOT_ALLOWED: model")
    refused(C.spec(output=long + "/tmp/escaped"), grpc.StatusCode.INVALID_ARGUMENT,
            "PATH_NOT_ALLOWED: output_dir")
    # /proc/self/cwd resolves into the daemon's working folder: the message must not say where.
    msg = refused(C.spec(train="/proc/self/cwd/x.jsonl"), grpc.StatusCode.INVALID_ARGUMENT,
                  "PATH_NOT_ALLOWED")
    check(os.getcwd() not in msg, f"echoes the daemon's folder: {msg}")


def test_paths_swapped_after_submit_stay_inside_the_roots():
    # A long job holds the only slot, so the victims wait in the queue after validation.
    blocker = C.create(C.spec(output="blocker", max_steps=100000, every=0)).name
    C.wait_state(blocker, "RUNNING")
    make_tokenized_data(D.path("data", "victim.jsonl"), 200, seed=5)
    data_job = C.create(C.spec(train="victim.jsonl", output="victim-data", max_steps=2)).name
    out_job = C.create(C.spec(output="later", max_steps=2)).name
    shutil.rmtree(D.path("outputs", "later"))  # created (with its marker) at submission
    check(C.state(data_job) == "QUEUED" and C.state(out_job) == "QUEUED", "victims not queued")
    os.remove(D.path("data", "victim.jsonl"))
    os.symlink(D.path("secret", "stolen.jsonl"), D.path("data", "victim.jsonl"))
    os.makedirs(D.path("secret", "drop"))
    os.symlink(D.path("secret", "drop"), D.path("outputs", "later"))
    C.stub.CancelJob(C.service_pb2.CancelJobRequest(name=blocker), timeout=10)
    job = failed_with(data_job, "PATH_NOT_ALLOWED")
    check("victim.jsonl" in job.error_message, job.error_message)
    failed_with(out_job, "PATH_NOT_ALLOWED")
    check(os.listdir(D.path("secret", "drop")) == [], f"wrote outside: {os.listdir(D.path('secret', 'drop'))}")


def test_output_dir_belongs_to_one_job():
    first = C.create(C.spec(output="shared", max_steps=4, every=2)).name
    C.wait_state(first, "SUCCEEDED")
    export = D.path("outputs", "shared", "export", "model.safetensors")
    before = open(export, "rb").read()
    refused(C.spec(output="shared", max_steps=6), grpc.StatusCode.FAILED_PRECONDITION,
            f"OUTPUT_DIR_IN_USE: output_dir '{D.path('outputs', 'shared')}' belongs to {first}")
    check(open(export, "rb").read() == before, "the first job's export changed")
    # resume_from naming a job that does not own the folder is refused too.
    spec = C.spec(output="shared", max_steps=6)
    spec.resume_from = "jobs/000000000000"
    refused(spec, grpc.StatusCode.FAILED_PRECONDITION, "resume_from names jobs/000000000000")
    # Naming the owner hands the folder over: the new job resumes from its checkpoint.
    spec.resume_from = first
    second = C.create(spec).name
    C.wait_state(second, "SUCCEEDED")
    resumed = [e for e in C.events(second) if e.type == "RESUMED"]
    check(resumed and int(resumed[0].metrics["step"]) == 4, f"RESUMED events {resumed}")
    # Event times carry sub-second precision (RFC 3339 with a fraction in JSON).
    check(any(e.time.nanos % 1_000_000_000 != 0 for e in C.events(second)), "whole-second times")
    marker = open(D.path("outputs", "shared", ".deltatune-job")).read().strip()
    check(marker == second, f"marker {marker}")


def test_cpu_jobs_are_admitted_against_the_machine():
    spec = C.spec(output="wide")
    spec.resources.cpu_ranks = 64
    refused(spec, grpc.StatusCode.FAILED_PRECONDITION, "CPUS_UNAVAILABLE: resources.cpu_ranks (64)")


def test_resume_from_a_checkpoint_folder():
    first = C.create(C.spec(output="origin", max_steps=4, every=2)).name
    C.wait_state(first, "SUCCEEDED")
    spec = C.spec(output="continued", max_steps=6)
    spec.resume_from = "origin/checkpoints/step-0000000004"
    second = C.create(spec).name
    C.wait_state(second, "SUCCEEDED")
    resumed = [e for e in C.events(second) if e.type == "RESUMED"]
    check(resumed and int(resumed[0].metrics["step"]) == 4, f"RESUMED events {resumed}")
    spec.resume_from = "../secret"
    refused(spec, grpc.StatusCode.INVALID_ARGUMENT, "PATH_NOT_ALLOWED: resume_from")


def test_an_overlong_document_is_a_bad_line_not_a_crash():
    # A 20 MB line (the default max_document_bytes is 16 MiB): once a 200 MB line killed the
    # rank with std::bad_alloc, retried until MAX_RESTARTS_EXCEEDED.
    path = D.path("data", "huge.jsonl")
    with open(D.path("data", "train.jsonl")) as good, open(path, "w") as f:
        f.write(good.read())
        f.write('{"input_ids": [' + "1, " * 7_000_000 + '1]}\n')
    failed = C.create(C.spec(train="huge.jsonl", output="huge-fail", max_steps=2)).name
    job = failed_with(failed, "INVALID_CONFIG")
    check("line too long: longer than max_document_bytes" in job.error_message, job.error_message)
    check(not [e for e in C.events(failed) if e.type == "FAULT_DETECTED"], "retried")
    spec = C.spec(train="huge.jsonl", output="huge-skip", max_steps=2)
    spec.data.bad_lines = C.job_pb2.BAD_LINE_POLICY_SKIP
    skipped = C.create(spec).name
    C.wait_state(skipped, "SUCCEEDED")
    loaded = [e for e in C.events(skipped) if e.type == "DATA_LOADED"][0]
    check(loaded.metrics["skipped_lines"] == 1, f"DATA_LOADED {loaded}")
    check(C.get(skipped).latest_metrics["skipped_lines"] == 1, "not in the job's status")
    check(any("huge.jsonl" in k for k in loaded.details), f"no per-file count: {loaded.details}")


def test_nothing_to_train_and_nan_fail_at_once():
    with open(D.path("data", "masked.jsonl"), "w") as f:
        for _ in range(50):
            f.write('{"input_ids": [1, 2, 3], "labels": [-100, -100, -100]}\n')
    job = failed_with(C.create(C.spec(train="masked.jsonl", output="masked")).name,
                      "NO_TRAINED_TOKENS")
    check("masked.jsonl" in job.error_message, job.error_message)
    spec = C.spec(output="nan", lr=1.0)
    spec.hyperparameters.weight_decay = 1e300  # finite, accepted; the weights overflow at once
    name = C.create(spec).name
    job = failed_with(name, "NON_FINITE")
    check("step " in job.error_message, job.error_message)
    check(not [e for e in C.events(name) if e.type in ("FAULT_DETECTED", "EXPORT_COMPLETED")],
          "retried or exported")
    spec.hyperparameters.weight_decay = float("nan")
    refused(spec, grpc.StatusCode.INVALID_ARGUMENT, "hyperparameters.weight_decay (nan)")


def test_a_full_disk_is_disk_full_not_retried():
    small = D.path("outputs", "small")
    os.makedirs(small)
    # A 3.5 MB filesystem: the first checkpoint (2.3 MB) fits, the second does not.
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3584k", "tmpfs", small],
                      capture_output=True).returncode != 0:
        print("  (no tmpfs mount here: root and mount(2) are needed; checked by unit tests only)")
        return
    try:
        name = C.create(C.spec(output="small/job", max_steps=6, every=2)).name
        job = failed_with(name, "DISK_FULL")
        check("No space left on device" in job.error_message and small in job.error_message,
              job.error_message)
        check(not [e for e in C.events(name) if e.type == "FAULT_DETECTED"], "retried blindly")
        committed = [e for e in C.events(name) if e.type == "CHECKPOINT_COMMITTED"]
        check(len(committed) == 1, f"{len(committed)} checkpoints committed")
        ckpt = committed[0].details["path"]
        manifest = json.load(open(os.path.join(ckpt, "manifest.json")))
        for f, entry in manifest["files"].items():
            data = open(os.path.join(ckpt, f), "rb").read()
            check(hashlib.sha256(data).hexdigest() == entry["sha256"], f"{f} changed")
    finally:
        subprocess.run(["umount", "-l", small])


def test_unparseable_requests_are_invalid_argument():
    # gRPC's own parsing answered these with UNIMPLEMENTED and no message.
    create = C.channel.unary_unary("/deltatune.v1.FineTuningService/CreateJob")
    deep = b"\x9b\x06" * 10000 + b"\x9c\x06" * 10000  # unknown field 99, groups 10,000 deep
    for what, body in (("garbage", b"\xff\xff\xff\xff\xff"),
                       ("invalid UTF-8 in request_id", b"\x12\x02\xff\xfe"),
                       ("10,000-deep nesting", deep)):
        try:
            create(body, timeout=10)
            raise AssertionError(f"{what}: accepted")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{what}: {e.code()}")
            check("is not a valid deltatune.v1.CreateJobRequest" in e.details(),
                  f"{what}: {e.details()}")
    get = C.channel.unary_unary("/deltatune.v1.FineTuningService/GetJob")
    try:
        get(b"\xff", timeout=10)
        raise AssertionError("GetJob garbage accepted")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"GetJob: {e.code()}")
    # An oversized id echoed into the error once made the status too large for its headers:
    # the client saw RESOURCE_EXHAUSTED. It is cut, and the code arrives.
    for call, request in (
            (C.stub.GetJob, C.service_pb2.GetJobRequest(name="jobs/" + "x" * 100000)),
            (C.stub.GetProfile, C.service_pb2.GetProfileRequest(name="jobs/000000000000",
                                                                profile_id="p" * 100000))):
        try:
            call(request, timeout=10)
            raise AssertionError("an oversized id was found")
        except grpc.RpcError as e:
            check(e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT),
                  f"oversized id: {e.code()}")
            check(len(e.details()) < 4096, f"oversized id: {len(e.details())} bytes of details")


def second_daemon(grpc_port, http_port, token=None, tls=None):
    """Another deltatuned with its own state, on the given ports, optionally with a token and
    TLS (tls: (cert_file, key_file))."""
    other = Daemon()
    other.port, other.http_port = grpc_port, http_port
    text = open(other.config).read().split("state_dir:")[1]
    auth = ""
    if token:
        with open(other.path("tokens"), "w") as f:
            f.write(token + "\n")
        auth = f"auth:\n  token_file: {other.path('tokens')}\n"
    if tls:
        auth += f"tls:\n  cert_file: {tls[0]}\n  key_file: {tls[1]}\n"
        other.tls_ca = tls[0]
    with open(other.config, "w") as f:
        f.write(f"listen:\n  grpc: 127.0.0.1:{grpc_port}\n  http: 127.0.0.1:{http_port}\n"
                f"{auth}state_dir:{text}")
    return other


def test_a_second_daemon_on_the_same_port_fails():
    # Run to its exit rather than through Daemon.start(): that probe would reach the first
    # daemon's /readyz on a shared HTTP port and take it for the second's.
    from harness import DELTATUNED, free_port
    for grpc_port, http_port, what in ((D.port, free_port(), "cannot listen on"),
                                       (free_port(), D.http_port, "listen.http: cannot bind")):
        other = second_daemon(grpc_port, http_port)
        proc = subprocess.Popen([DELTATUNED, "--config", other.config], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AssertionError(f"a second daemon kept running on {grpc_port}/{http_port}")
        check(proc.returncode != 0, f"exit {proc.returncode}: {out}")
        check(what in out, f"'{what}' not in: {out}")


def test_metrics_without_the_token_show_no_jobs():
    import urllib.request
    from harness import free_port
    other = second_daemon(free_port(), free_port(), token="s3cret-token")
    other.init_model()
    make_tokenized_data(other.path("data", "train.jsonl"), 50, seed=3)
    other.start()
    try:
        client = Client(other.port, STUBS)
        spec = client.spec(max_steps=3)
        md = [("authorization", "Bearer s3cret-token")]
        name = client.stub.CreateJob(client.service_pb2.CreateJobRequest(spec=spec), metadata=md,
                                     timeout=10).name
        with urllib.request.urlopen(other.http("/metrics")) as r:
            public = r.read().decode()
        check("deltatune_jobs{" in public, "daemon-wide series missing")
        check(name not in public and "deltatune_job_loss" not in public, "job series exposed")
        req = urllib.request.Request(other.http("/metrics"),
                                     headers={"Authorization": "Bearer s3cret-token"})
        with urllib.request.urlopen(req) as r:
            check(name in r.read().decode(), "job series missing with the token")
        try:
            urllib.request.urlopen(other.http("/v1/jobs"))
            raise AssertionError("/v1/jobs served without the token")
        except urllib.error.HTTPError as e:
            check(e.code == 401, f"/v1/jobs without the token: {e.code}")
    finally:
        other.stop()


def test_the_cli_talks_to_a_tls_daemon():
    from harness import CLI, free_port, self_signed_cert
    certs = tempfile.mkdtemp(prefix="deltatune-tls-")
    cert, key = self_signed_cert(certs)
    other = second_daemon(free_port(), free_port(), tls=(cert, key))
    other.start()
    try:
        def cli(*flags):
            return subprocess.run([CLI, "list", "--address", f"127.0.0.1:{other.port}",
                                   "--timeout", "5", *flags], capture_output=True, text=True)
        ok = cli("--tls", "--ca-file", cert)
        check(ok.returncode == 0, f"--tls --ca-file: exit {ok.returncode}: {ok.stderr}")
        env_ok = subprocess.run([CLI, "list", "--address", f"127.0.0.1:{other.port}"],
                                capture_output=True, text=True,
                                env=dict(os.environ, DELTATUNE_CA_FILE=cert))
        check(env_ok.returncode == 0, f"$DELTATUNE_CA_FILE: exit {env_ok.returncode}")
        plain = cli()  # a plaintext client against a TLS port: unavailable (exit 4)
        check(plain.returncode == 4, f"plaintext: exit {plain.returncode}: {plain.stderr}")
        untrusted = cli("--tls")  # the self-signed certificate is not in the system's roots
        check(untrusted.returncode == 4, f"untrusted: exit {untrusted.returncode}")
        missing = cli("--ca-file", os.path.join(certs, "none.pem"))
        check(missing.returncode == 2 and "--ca-file" in missing.stderr,
              f"missing CA file: exit {missing.returncode}: {missing.stderr}")
        # The admin listener too: HTTPS with the same certificate, nothing in cleartext.
        with other.urlopen("/healthz") as r:
            check(r.status == 200 and other.http("/").startswith("https:"), "HTTPS /healthz")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{other.http_port}/healthz", timeout=5)
            check(False, "the admin listener answered plain HTTP")
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException):
            pass
    finally:
        other.stop()
        shutil.rmtree(certs, ignore_errors=True)


try:
    run_tests([
        ("overlong component after a symlink is refused",
         test_overlong_component_after_symlink_is_refused),
        ("paths swapped after submit stay inside the roots",
         test_paths_swapped_after_submit_stay_inside_the_roots),
        ("an output_dir belongs to one job", test_output_dir_belongs_to_one_job),
        ("resume_from a checkpoint folder", test_resume_from_a_checkpoint_folder),
        ("CPU jobs are admitted against the machine", test_cpu_jobs_are_admitted_against_the_machine),
        ("an overlong document is a bad line, not a crash",
         test_an_overlong_document_is_a_bad_line_not_a_crash),
        ("nothing to train and NaN fail at once", test_nothing_to_train_and_nan_fail_at_once),
        ("a full disk is DISK_FULL, not retried", test_a_full_disk_is_disk_full_not_retried),
        ("unparseable requests are INVALID_ARGUMENT", test_unparseable_requests_are_invalid_argument),
        ("a second daemon on the same port fails", test_a_second_daemon_on_the_same_port_fails),
        ("metrics without the token show no jobs", test_metrics_without_the_token_show_no_jobs),
        ("the CLI talks to a TLS daemon", test_the_cli_talks_to_a_tls_daemon),
    ])
finally:
    D.stop()
