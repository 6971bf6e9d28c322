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


class LatencyProbe:
    """GetJob on `name` every 20 ms from a thread: the slowest answer, and any failure."""

    def __init__(self, name):
        import threading
        self.name, self.worst, self.errors, self.calls = name, 0.0, [], 0
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        import time
        while not self.stop_flag.is_set():
            t = time.monotonic()
            try:
                C.stub.GetJob(C.service_pb2.GetJobRequest(name=self.name), timeout=5)
            except grpc.RpcError as e:
                self.errors.append(f"{e.code()} {e.details()}")
            self.worst = max(self.worst, time.monotonic() - t)
            self.calls += 1
            time.sleep(0.02)

    def stop(self):
        self.stop_flag.set()
        self.thread.join()
        return self


def refused_or_failed(spec, text):
    """Refused at submission, or the job fails at once; either way naming `text`."""
    try:
        job = C.create(spec).name
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{e.code()} {e.details()}")
        check(text in e.details(), f"'{text}' not in '{e.details()}'")
        return
    done = C.wait_state(job, "FAILED", "SUCCEEDED", timeout=60)
    check(done.state == C.job_pb2.Job.FAILED, f"{job} ran: {done}")
    check(text in done.error_message, f"'{text}' not in '{done.error_message}'")


def test_fifos_at_every_path_never_stall_the_api():
    """A FIFO wherever a client names a file or a job reads or writes one: refused or failed at
    once, never opened for reading. Once, a FIFO at a profile's path wedged every gRPC call, and
    a data file renamed between a FIFO and a file during CreateJob killed the API for good."""
    import threading
    import time
    steady = C.create(C.spec(output="fifo-steady", max_steps=2)).name
    C.wait_state(steady, "SUCCEEDED")
    probe = LatencyProbe(steady)
    try:
        os.mkfifo(D.path("data", "fifo.jsonl"))
        refused(C.spec(train="fifo.jsonl"), grpc.StatusCode.INVALID_ARGUMENT, "fifo.jsonl")
        # The model's files and the tokenizer.
        for part in ("config.json", "model.safetensors"):
            folder = D.path("models", "fifo-" + part.split(".")[0])
            shutil.copytree(D.path("models", "tiny"), folder)
            os.remove(os.path.join(folder, part))
            os.mkfifo(os.path.join(folder, part))
            refused_or_failed(C.spec(model=os.path.basename(folder),
                                     output="fifo-" + part.split(".")[0]), part)
        os.mkfifo(D.path("models", "fifo-tokenizer.json"))
        with open(D.path("data", "chat.jsonl"), "w") as f:
            for i in range(20):
                f.write(json.dumps({"messages": [{"role": "user", "content": f"hi {i}"},
                                                 {"role": "assistant", "content": "yo"}]}) + "\n")
        spec = C.spec(train="chat.jsonl", output="fifo-tokenizer")
        spec.data.format = C.job_pb2.DATA_FORMAT_CHAT
        spec.data.tokenizer = D.path("models", "fifo-tokenizer.json")
        refused_or_failed(spec, "fifo-tokenizer.json")
        # A data file renamed between a FIFO and a file while CreateJob(validate_only) runs.
        make_tokenized_data(D.path("data", "flip-file.jsonl"), 50, seed=6)
        os.mkfifo(D.path("data", "flip-fifo"))
        done = threading.Event()

        def flip():
            while not done.is_set():
                for src in ("flip-file.jsonl", "flip-fifo"):
                    os.link(D.path("data", src), D.path("data", "flip.tmp"))
                    os.replace(D.path("data", "flip.tmp"), D.path("data", "flip.jsonl"))

        flipper = threading.Thread(target=flip, daemon=True)
        flipper.start()
        outcomes = set()
        deadline = time.time() + 3
        while time.time() < deadline:
            try:
                C.create(C.spec(train="flip.jsonl"), validate_only=True)
                outcomes.add("accepted")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{e.code()} {e.details()}")
                outcomes.add("refused")
        done.set()
        flipper.join()
        # A checkpoint to resume from whose state is a FIFO: the job fails, it does not hang.
        src = D.path("outputs", "origin", "checkpoints", "step-0000000004")
        dst = D.path("outputs", "fifo-ckpt")
        shutil.copytree(src, dst)
        os.remove(os.path.join(dst, "state.json"))
        os.mkfifo(os.path.join(dst, "state.json"))
        spec = C.spec(output="fifo-resumed", max_steps=6)
        spec.resume_from = "fifo-ckpt"
        refused_or_failed(spec, "state.json")
        # A FIFO where the job writes its export: replaced, as every written file is.
        job = C.create(C.spec(output="fifo-export", max_steps=2)).name
        os.makedirs(D.path("outputs", "fifo-export", "export"))  # before the rank starts
        os.mkfifo(D.path("outputs", "fifo-export", "export", "config.json"))
        C.wait_state(job, "SUCCEEDED", timeout=60)
        check(os.path.isfile(D.path("outputs", "fifo-export", "export", "config.json")),
              "the export's config.json is not a file")
    finally:
        probe.stop()
    print(f"  flip outcomes {sorted(outcomes)}; GetJob: {probe.calls} calls, slowest "
          f"{probe.worst * 1000:.0f} ms")
    check(not probe.errors, f"GetJob failed: {probe.errors[:3]}")
    check(probe.worst < 0.1, f"GetJob took {probe.worst * 1000:.0f} ms")


def test_huge_data_files_at_submission_never_stall_the_api():
    """Four clients validating a 512 MiB file of blank lines at once: each answered in about a
    second, GetJob and ListJobs in under 100 ms throughout. Once, validation read the whole file
    on a gRPC thread (13.5 s per GiB) and four such calls stalled ListJobs for 30 s."""
    import threading
    import time
    steady = C.create(C.spec(output="huge-steady", max_steps=2)).name
    C.wait_state(steady, "SUCCEEDED")
    with open(D.path("data", "blank.jsonl"), "wb") as f:
        chunk = b"\n" * (1 << 20)
        for _ in range(512):
            f.write(chunk)
        f.write(b'{"input_ids": [1, 2, 3]}\n')
    probe = LatencyProbe(steady)
    slowest_list, answers = [0.0], []

    def validate():
        for _ in range(3):
            t = time.monotonic()
            try:
                C.create(C.spec(train="blank.jsonl"), validate_only=True)
                answers.append(("accepted", time.monotonic() - t))
            except grpc.RpcError as e:
                answers.append((f"{e.code()} {e.details()[:120]}", time.monotonic() - t))

    def list_jobs():
        while len(answers) < 12:
            t = time.monotonic()
            C.stub.ListJobs(C.service_pb2.ListJobsRequest(), timeout=10)
            slowest_list[0] = max(slowest_list[0], time.monotonic() - t)
            time.sleep(0.02)

    threads = [threading.Thread(target=validate) for _ in range(4)]
    threads.append(threading.Thread(target=list_jobs))
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        probe.stop()
        os.remove(D.path("data", "blank.jsonl"))
    worst = max(seconds for _, seconds in answers)
    print(f"  12 validations of 512 MiB of blank lines: slowest {worst:.2f} s; GetJob "
          f"{probe.calls} calls, slowest {probe.worst * 1000:.0f} ms; ListJobs slowest "
          f"{slowest_list[0] * 1000:.0f} ms")
    check(all(what == "accepted" for what, _ in answers), f"answers {answers}")
    check(worst < 5, f"a validation took {worst:.1f} s")
    check(not probe.errors, f"GetJob failed: {probe.errors[:3]}")
    check(probe.worst < 0.1, f"GetJob took {probe.worst * 1000:.0f} ms")
    check(slowest_list[0] < 0.1, f"ListJobs took {slowest_list[0] * 1000:.0f} ms")


def test_a_request_storm_during_training():
    """500 open event streams, 4 threads of ListJobs with garbage page tokens and a 5 MB
    CreateJob every 0.5 s while a job trains: GetJob p99 under 20 ms, and the job's losses equal
    an unloaded run's, bit for bit."""
    import threading
    import time

    def losses(name):
        return [e.metrics["loss"] for e in C.events(name) if e.type == "STEP_METRICS"]

    quiet = C.create(C.spec(output="storm-quiet", max_steps=24)).name
    C.wait_state(quiet, "SUCCEEDED", timeout=300)
    stop = threading.Event()
    failures, latencies, counts = [], [], {"list": 0, "create": 0}

    def garbage_lists():
        while not stop.is_set():
            try:
                C.stub.ListJobs(C.service_pb2.ListJobsRequest(page_token=os.urandom(24).hex()),
                                timeout=10)
                failures.append("ListJobs accepted a garbage page token")
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    failures.append(f"ListJobs: {e.code()}")
            counts["list"] += 1

    def big_creates():
        spec = C.spec(output="storm-big")
        spec.display_name = "x" * (5 << 20)
        while not stop.wait(0.5):
            try:
                C.stub.CreateJob(C.service_pb2.CreateJobRequest(spec=spec), timeout=10)
                failures.append("a 5 MB CreateJob was accepted")
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    grpc.StatusCode.INVALID_ARGUMENT):
                    failures.append(f"CreateJob 5 MB: {e.code()}")
            counts["create"] += 1

    loud = C.create(C.spec(output="storm-loud", max_steps=24)).name
    streams = [C.stub.StreamJobEvents(C.service_pb2.StreamJobEventsRequest(name=loud))
               for _ in range(500)]
    workers = [threading.Thread(target=garbage_lists) for _ in range(4)]
    workers.append(threading.Thread(target=big_creates))
    for w in workers:
        w.start()
    try:
        while C.get(loud).state not in (C.job_pb2.Job.SUCCEEDED, C.job_pb2.Job.FAILED):
            t = time.monotonic()
            C.stub.GetJob(C.service_pb2.GetJobRequest(name=loud), timeout=5)
            latencies.append(time.monotonic() - t)
            time.sleep(0.02)
    finally:
        stop.set()
        for w in workers:
            w.join()
        for stream in streams:
            stream.cancel()
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    print(f"  storm: {len(latencies)} GetJob, p99 {p99 * 1000:.1f} ms; {counts['list']} garbage "
          f"ListJobs, {counts['create']} 5 MB CreateJobs, 500 streams")
    check(not failures, f"storm answers: {failures[:3]}")
    check(C.get(loud).state == C.job_pb2.Job.SUCCEEDED, f"{loud}: {C.get(loud).state}")
    check(losses(loud) == losses(quiet) and len(losses(quiet)) == 24,
          f"losses under the storm {losses(loud)[:3]} vs {losses(quiet)[:3]}")
    check(p99 < 0.02, f"GetJob p99 {p99 * 1000:.1f} ms")


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
        ("FIFOs at every path never stall the API", test_fifos_at_every_path_never_stall_the_api),
        ("huge data files at submission never stall the API",
         test_huge_data_files_at_submission_never_stall_the_api),
        ("a request storm during training", test_a_request_storm_during_training),
    ])
finally:
    D.stop()
