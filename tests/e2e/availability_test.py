#!/usr/bin/env python3
"""The API stays answerable whatever clients and files do, each case one that wedged it once.

  - A FIFO at a profile's path wedged every gRPC call; a data file renamed between a FIFO and a
    file during CreateJob killed the API for good. Now every file is opened non-blocking and
    checked to be a regular file before any read.
  - Validating a huge data file read it all on a gRPC thread: four such calls stalled ListJobs
    for 30 s. Now validation reads a bounded prefix on a bounded worker pool.
  - Eight connections trickling a header byte every 2 s took every admin HTTP worker: /healthz
    and /metrics stopped answering. Now connections are events, capped per client address, and
    cut when their headers take over 10 s.
  - A storm of garbage requests, 5 MB messages and open streams while a job trains: GetJob stays
    fast and the job's losses are bit for bit an unloaded run's.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from harness import Client, Daemon, check, load_stubs, make_tokenized_data, run_tests

STUBS_DIR = tempfile.mkdtemp(prefix="deltatune-stubs-")
STUBS = load_stubs(STUBS_DIR)
D = Daemon()
D.init_model()
make_tokenized_data(D.path("data", "train.jsonl"), 200, seed=3)
D.start()
C = Client(D.port, STUBS)
grpc = C.grpc


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
        refused_or_failed(C.spec(train="fifo.jsonl"), "fifo.jsonl")
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
        origin = C.create(C.spec(output="origin", max_steps=4, every=2)).name
        C.wait_state(origin, "SUCCEEDED")
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


def test_slow_http_clients_never_stall_the_probes():
    """64 connections from 127.0.0.2 trickling one header byte every 2 s: /healthz from 127.0.0.1
    answers with p99 under 50 ms throughout, and every slow connection is refused (16 per client
    address) or cut once its headers took 10 s."""
    import socket
    import time
    slow = []
    for _ in range(64):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", D.http_port))
        s.setblocking(False)
        slow.append(s)
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    closed, latencies, sent = {}, [], 0
    start = next_byte = time.monotonic()
    while time.monotonic() - start < 14:
        if time.monotonic() >= next_byte:
            for i, s in enumerate(slow):
                if i in closed:
                    continue
                try:
                    if s.recv(1) == b"":
                        closed[i] = time.monotonic() - start
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    closed[i] = time.monotonic() - start
                    continue
                try:
                    s.send(request[sent % len(request):][:1])
                except OSError:
                    closed[i] = time.monotonic() - start
            sent += 1
            next_byte += 2
        t = time.monotonic()
        with D.urlopen("/healthz", timeout=5) as r:
            check(r.status == 200, f"/healthz {r.status}")
        latencies.append(time.monotonic() - t)
        time.sleep(0.02)
    for s in slow:
        s.close()
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    at_once = sum(1 for t in closed.values() if t < 3)
    cut = sorted(t for t in closed.values() if t >= 3)
    print(f"  64 slow connections: {at_once} closed at once, {len(cut)} cut at "
          f"{cut[0] if cut else 0:.0f}-{cut[-1] if cut else 0:.0f} s; {len(latencies)} /healthz, "
          f"p99 {p99 * 1000:.1f} ms, slowest {latencies[-1] * 1000:.1f} ms")
    check(p99 < 0.05, f"/healthz p99 {p99 * 1000:.1f} ms")
    check(len(closed) == 64, f"{64 - len(closed)} slow connections still open after 14 s")


def test_a_request_storm_during_training():
    """500 open event streams, 4 threads of ListJobs with garbage page tokens and a 5 MB
    CreateJob every 0.5 s while a job trains: GetJob p99 under 20 ms, and the job's losses equal
    an unloaded run's, bit for bit. The storm runs in its own process (storm_client.py), so the
    probe measures the daemon, not this interpreter's lock."""
    import time

    def losses(name):
        return [e.metrics["loss"] for e in C.events(name) if e.type == "STEP_METRICS"]

    quiet = C.create(C.spec(output="storm-quiet", max_steps=48)).name
    C.wait_state(quiet, "SUCCEEDED", timeout=300)
    loud = C.create(C.spec(output="storm-loud", max_steps=48)).name
    storm = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                      "storm_client.py"), str(D.port), STUBS_DIR, loud],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    latencies = []
    try:
        check(storm.stdout.readline().strip() == "ready", "the storm client did not start")
        while C.get(loud).state not in (C.job_pb2.Job.SUCCEEDED, C.job_pb2.Job.FAILED):
            t = time.monotonic()
            C.stub.GetJob(C.service_pb2.GetJobRequest(name=loud), timeout=5)
            latencies.append(time.monotonic() - t)
            time.sleep(0.02)
    finally:
        report, _ = storm.communicate("", timeout=60)
    counts = json.loads(report.strip().splitlines()[-1])
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    print(f"  storm: {len(latencies)} GetJob, p50 {latencies[len(latencies) // 2] * 1000:.1f} "
          f"ms, p99 {p99 * 1000:.1f} ms; {counts['list']} garbage ListJobs, "
          f"{counts['create']} 5 MB CreateJobs, 500 streams")
    check(not counts["failures"], f"storm answers: {counts['failures'][:3]}")
    check(C.get(loud).state == C.job_pb2.Job.SUCCEEDED, f"{loud}: {C.get(loud).state}")
    check(losses(loud) == losses(quiet) and len(losses(quiet)) == 48,
          f"losses under the storm {losses(loud)[:3]} vs {losses(quiet)[:3]}")
    check(p99 < 0.02, f"GetJob p99 {p99 * 1000:.1f} ms")


try:
    run_tests([
        ("FIFOs at every path never stall the API", test_fifos_at_every_path_never_stall_the_api),
        ("huge data files at submission never stall the API",
         test_huge_data_files_at_submission_never_stall_the_api),
        ("slow HTTP clients never stall the probes", test_slow_http_clients_never_stall_the_probes),
        ("a request storm during training", test_a_request_storm_during_training),
    ])
finally:
    D.stop()
