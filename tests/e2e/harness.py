"""End-to-end harness: a real deltatuned (real rank processes, real trainer) on loopback, driven by
an independent Python gRPC client (grpcio, stubs generated from proto/ at start-up).

Environment: DELTATUNE_BINARY_DIR (the CMake build folder), DELTATUNE_SOURCE_DIR (the repo).
"""
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SOURCE = os.environ.get("DELTATUNE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
BUILD = os.environ.get("DELTATUNE_BINARY_DIR", os.path.join(SOURCE, "build"))
DELTATUNED = os.path.join(BUILD, "daemon", "deltatuned")
CLI = os.path.join(BUILD, "daemon", "deltatune")


def load_stubs(out_dir):
    """Compiles proto/deltatune/v1 with grpc_tools into out_dir and imports the modules."""
    from grpc_tools import protoc
    import grpc_tools
    proto_root = os.path.join(SOURCE, "proto")
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    files = [os.path.join(proto_root, "deltatune", "v1", f)
             for f in ("job.proto", "service.proto", "rank.proto", "agent.proto")]
    files.append(os.path.join(proto_root, "google", "rpc", "status.proto"))
    rc = protoc.main(["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}"] + files)
    if rc != 0:
        raise RuntimeError(f"protoc failed ({rc})")
    sys.path.insert(0, out_dir)
    from deltatune.v1 import job_pb2, service_pb2, service_pb2_grpc  # noqa: E402
    return job_pb2, service_pb2, service_pb2_grpc


def self_signed_cert(folder):
    """(cert, key) PEM files for localhost and 127.0.0.1 made by openssl, valid for a day."""
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tokenized_data(path, docs, seed, vocab=512):
    """Learnable pre-tokenized documents: arithmetic progressions mod vocab, varied lengths."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(docs):
            n = rng.randint(8, 60)
            start, stride = rng.randrange(vocab), rng.randint(1, 5)
            ids = [(start + i * stride) % vocab for i in range(n)]
            f.write(json.dumps({"input_ids": ids, "labels": ids}) + "\n")


class Daemon:
    """A deltatuned under a temporary tree: roots models/, data/, outputs/ and state/."""

    def __init__(self, root=None, shutdown_grace=30, heartbeat_timeout=60):
        self.root = root or tempfile.mkdtemp(prefix="deltatune-e2e-")
        for d in ("models", "data", "outputs", "state"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        self.port, self.http_port = free_port(), free_port()
        self.tls_ca = None  # the CA file of a TLS daemon (both listeners then speak TLS)
        self.config = os.path.join(self.root, "daemon.yaml")
        with open(self.config, "w") as f:
            f.write(f"""listen:
  grpc: 127.0.0.1:{self.port}
  http: 127.0.0.1:{self.http_port}
state_dir: {self.root}/state
roots:
  models: [{self.root}/models]
  data: [{self.root}/data]
  outputs: [{self.root}/outputs]
scheduler:
  shutdown_grace_seconds: {shutdown_grace}
  heartbeat_timeout_seconds: {heartbeat_timeout}
  gpus: 0
""")
        self.proc = None
        self.log = None

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def require_token(self, token):
        """Before start(): the daemon takes `token` only (auth.token_file); returns the file."""
        path = self.path("token")
        with open(path, "w") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
        with open(self.config, "a") as f:
            f.write(f"auth:\n  token_file: {path}\n")
        return path

    def enable_tls(self, cert, key):
        """Before start(): both listeners serve TLS with this (self-signed) certificate and key."""
        with open(self.config, "a") as f:
            f.write(f"tls:\n  cert_file: {cert}\n  key_file: {key}\n")
        self.tls_ca = cert

    def urlopen(self, route, headers=None, timeout=10):
        """GET `route` on the admin listener (HTTPS, verified with tls_ca, on a TLS daemon)."""
        import ssl
        context = ssl.create_default_context(cafile=self.tls_ca) if self.tls_ca else None
        request = urllib.request.Request(self.http(route), headers=headers or {})
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def init_model(self, name="tiny", config="configs/models/tiny-a.json", seed=0):
        subprocess.run([CLI, "init-model", "--config", os.path.join(SOURCE, config), "--out",
                        self.path("models", name), "--seed", str(seed)], check=True,
                       stdout=subprocess.DEVNULL)

    def start(self):
        self.log = open(self.path("deltatuned.log"), "a")
        self.proc = subprocess.Popen([DELTATUNED, "--config", self.config], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("deltatuned exited: " + open(self.path("deltatuned.log")).read())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
                with self.urlopen("/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("deltatuned did not become ready")

    def agent_counts(self):
        """deltatune_agents by state, from /metrics."""
        with self.urlopen("/metrics") as r:
            text = r.read().decode()
        return {s: int(n) for s, n in
                re.findall(r'^deltatune_agents\{state="(\w+)"\} (\d+)$', text, re.M)}

    def wait_agent_counts(self, want, timeout=20):
        """Polls agent_counts until it equals `want`; returns the time it did."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.agent_counts() == want:
                return time.time()
            time.sleep(0.2)
        raise AssertionError(f"agents {self.agent_counts()}, want {want}")

    def http(self, route):
        scheme = "https" if self.tls_ca else "http"
        return f"{scheme}://127.0.0.1:{self.http_port}{route}"

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=timeout)
        if self.log:
            self.log.close()
        return self.proc.returncode if self.proc else None

    def rank_pids(self, job_id):
        """Pids of this job's rank processes (`deltatuned rank ... --job jobs/<id> ...`)."""
        pids = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
                with open(f"/proc/{pid}/stat") as f:
                    zombie = f.read().split(")")[-1].split()[0] == "Z"
            except OSError:
                continue
            if b"rank" in args and f"jobs/{job_id}".encode() in args and not zombie:
                pids.append(int(pid))
        return pids


def bearer_channel(channel, token):
    """`channel` with `authorization: Bearer <token>` on every call."""
    import collections
    import grpc

    class Details(collections.namedtuple("Details", ("method", "timeout", "metadata", "credentials",
                                                     "wait_for_ready", "compression")),
                  grpc.ClientCallDetails):
        pass

    class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
        def _add(self, d):
            md = list(d.metadata or []) + [("authorization", f"Bearer {token}")]
            return Details(d.method, d.timeout, md, d.credentials, d.wait_for_ready,
                           d.compression)

        def intercept_unary_unary(self, continuation, details, request):
            return continuation(self._add(details), request)

        def intercept_unary_stream(self, continuation, details, request):
            return continuation(self._add(details), request)

    return grpc.intercept_channel(channel, Bearer())


class Client:
    def __init__(self, port, stubs, token=None):
        import grpc
        self.grpc = grpc
        self.job_pb2, self.service_pb2, service_pb2_grpc = stubs
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        if token:
            self.channel = bearer_channel(self.channel, token)
        self.stub = service_pb2_grpc.FineTuningServiceStub(self.channel)

    def spec(self, model="tiny", train="train.jsonl", output="out", max_steps=12, every=3,
             tokens_per_batch=256, eval_files=(), labels=None, priority=0, lr=3e-3):
        s = self.job_pb2.JobSpec(model=model, output_dir=output, seed=7, priority=priority,
                                 max_restarts=5)
        s.data.train_files.append(train)
        s.data.eval_files.extend(eval_files)
        s.data.format = self.job_pb2.DATA_FORMAT_TOKENIZED
        h = s.hyperparameters
        h.learning_rate, h.max_steps, h.tokens_per_batch, h.warmup_steps = lr, max_steps, \
            tokens_per_batch, 2
        s.checkpoint.every_n_steps, s.checkpoint.keep_last_n = every, 3
        s.resources.gpus, s.resources.cpu_ranks = 0, 1
        for k, v in (labels or {}).items():
            s.labels[k] = v
        return s

    def create(self, spec, request_id="", validate_only=False):
        return self.stub.CreateJob(self.service_pb2.CreateJobRequest(
            spec=spec, request_id=request_id, validate_only=validate_only), timeout=10)

    def get(self, name):
        return self.stub.GetJob(self.service_pb2.GetJobRequest(name=name), timeout=10)

    def state(self, name):
        return self.job_pb2.Job.State.Name(self.get(name).state)

    def wait(self, name, predicate, timeout=120, what="condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = self.get(name)
            if predicate(job):
                return job
            time.sleep(0.05)
        raise AssertionError(f"{name}: timed out waiting for {what}; last {job}")

    def wait_state(self, name, *states, timeout=120):
        want = {self.job_pb2.Job.State.Value(s) for s in states}
        return self.wait(name, lambda j: j.state in want, timeout, "/".join(states))

    def events(self, name, min_sequence=0, page_size=0, type_=""):
        out, token = [], ""
        while True:
            r = self.stub.ListJobEvents(self.service_pb2.ListJobEventsRequest(
                name=name, page_size=page_size, page_token=token, min_sequence=min_sequence,
                type=type_), timeout=10)
            out.extend(r.events)
            token = r.next_page_token
            if not token:
                return out

    def step_records(self, name):
        """step -> set of (loss, batch digest) reported (a resumed run repeats some steps)."""
        out = {}
        for e in self.events(name, type_="STEP_METRICS"):
            out.setdefault(int(e.metrics["step"]), set()).add(
                (e.metrics["loss"], e.metrics["batch_digest"]))
        return out

    def step_losses(self, name):
        """step -> every loss reported for it (a resumed run repeats steps after its checkpoint)."""
        losses = {}
        for e in self.events(name, type_="STEP_METRICS"):
            losses.setdefault(int(e.metrics["step"]), []).append(e.metrics["loss"])
        return losses


def started_daemon(train_docs=300, eval_docs=20):
    """A started Daemon with the tiny model, data/train.jsonl and data/eval.jsonl, and a Client."""
    stubs = load_stubs(tempfile.mkdtemp(prefix="deltatune-stubs-"))
    d = Daemon()
    d.init_model()
    make_tokenized_data(d.path("data", "train.jsonl"), train_docs, seed=1)
    make_tokenized_data(d.path("data", "eval.jsonl"), eval_docs, seed=2)
    d.start()
    return d, Client(d.port, stubs)


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def run_tests(tests):
    """Runs (name, fn) pairs, printing one line each; exits non-zero if any failed."""
    failed = 0
    for name, fn in tests:
        t0 = time.time()
        try:
            fn()
            print(f"PASS {name} ({time.time() - t0:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
