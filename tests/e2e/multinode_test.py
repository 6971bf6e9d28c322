#!/usr/bin/env python3
"""One job over several machines (docs/multinode.md): a supervisor deltatuned and three node
agents, each agent in its own network namespace on a bridge the test creates, CPU ranks over Gloo
between the namespaces, every rank's protocol relayed by its agent.

  - the demo job with one rank on each of two agents reports, step by step, the same loss and the
    same batch as the same job run by the supervisor alone, and exports the same bytes;
  - an agent SIGKILLed mid-job (its rank dies with it): the job recovers from its last checkpoint
    on the agents left and finishes with no document skipped or repeated;
  - an agent's link cut mid-job: the same, the cut agent LOST within the heartbeat timeout;
  - the supervisor SIGKILLed mid-job and restarted: the agents register again and the job
    resumes on them from its last checkpoint, with the same result;
  - an agent given SIGTERM (a node drain): the job checkpoints, moves to the other agents without
    a fault and trains no step twice;
  - agents need the token; a relayed call for a rank the agent does not run is refused.
Exits 77 (skipped) where network namespaces cannot be made (no root or no CAP_NET_ADMIN)."""
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time

from harness import (DELTATUNED, Client, Daemon, bearer_channel, check, load_stubs,
                     make_tokenized_data, run_tests)
from netns import Network

NET = Network(3, 214)
if not NET.make():
    NET.remove()
    print("SKIP: cannot create network namespaces here (needs CAP_NET_ADMIN)")
    sys.exit(77)

STUBS = load_stubs(tempfile.mkdtemp(prefix="deltatune-stubs-"))
D = Daemon(heartbeat_timeout=3)
TOKEN = D.require_token("cluster-secret")
with open(D.config) as f:  # the bridge must reach the supervisor (hence the token)
    config = f.read()
with open(D.config, "w") as f:
    f.write(config.replace("grpc: 127.0.0.1:", "grpc: 0.0.0.0:"))
D.init_model()
make_tokenized_data(D.path("data", "train.jsonl"), 400, seed=3)
D.start()
C = Client(D.port, STUBS, token="cluster-secret")
AGENTS = [None, None, None]
STEPS = 24


def start_agent(i):
    log = open(D.path(f"agent-{i}.log"), "a")
    AGENTS[i] = subprocess.Popen(
        NET.run_in(i, [DELTATUNED, "agent", "--supervisor", f"{NET.supervisor_address()}:{D.port}",
                       "--token-file", TOKEN, "--plaintext-token", "allow", "--hostname",
                       f"node-{i}", "--address", NET.address(i), "--cpu-ranks", "1",
                       "--state-dir", D.path(f"agent-{i}")]),
        stdout=log, stderr=subprocess.STDOUT)


def spec(output, nodes):
    s = C.spec(output=output, max_steps=STEPS, every=4)
    s.resources.cpu_ranks = 2
    s.resources.nodes = nodes
    s.max_restarts = 5
    return s


def export_digests(name):
    path = C.get(name).result_model
    return {f: hashlib.sha256(open(os.path.join(path, f), "rb").read()).hexdigest()
            for f in sorted(os.listdir(path))}


REFERENCE = {}


def reference():
    """The same job with both ranks on the supervisor's machine."""
    if not REFERENCE:
        name = C.create(spec("one-machine", 0)).name
        C.wait_state(name, "SUCCEEDED", timeout=300)
        REFERENCE["steps"] = {s: r.pop() for s, r in C.step_records(name).items()}
        REFERENCE["export"] = export_digests(name)
        check(sorted(REFERENCE["steps"]) == list(range(1, STEPS + 1)),
              f"reference steps {sorted(REFERENCE['steps'])}")
    return REFERENCE


def check_equals_reference(name, unreported=()):
    """Same losses and batches as the one-machine run for every step reported, every step
    reported but `unreported`, and the same exported bytes."""
    ref = reference()
    got = C.step_records(name)
    check(sorted(set(got) | set(unreported)) == sorted(ref["steps"]) and
          not set(got) & set(unreported), f"steps reported {sorted(got)}, unreported {unreported}")
    for step, records in got.items():
        check(records == {ref["steps"][step]}, f"step {step}: {records} != {ref['steps'][step]}")
    check(export_digests(name) == ref["export"], "the export differs from the one-machine run")


def rank_namespaces(job_id):
    """The network namespace of each running rank of the job (inode of /proc/<pid>/ns/net)."""
    return {os.stat(f"/proc/{p}/ns/net").st_ino for p in D.rank_pids(job_id)}


def test_job_over_two_agents_equals_one_machine():
    reference()
    for i in range(3):
        start_agent(i)
    D.wait_agent_counts({"ALIVE": 3, "LOST": 0})
    name = C.create(spec("two-nodes", 2)).name
    C.wait(name, lambda j: j.progress.step >= 2, what="step 2")
    job_id = name.split("/")[1]
    spaces = rank_namespaces(job_id)
    mine = os.stat("/proc/self/ns/net").st_ino
    check(len(spaces) == 2 and mine not in spaces, f"ranks in namespaces {spaces}, mine {mine}")
    admitted = [e for e in C.events(name) if e.type == "ADMITTED"]
    check(admitted and "node-0" in admitted[0].details.get("placement", ""),
          f"ADMITTED {admitted}")
    C.wait_state(name, "SUCCEEDED", timeout=300)
    check_equals_reference(name)
    logs = [D.path(f"agent-{i}", "jobs", job_id, "attempt-0", f"rank-{i}.log") for i in range(2)]
    check(all(os.path.exists(p) for p in logs), f"rank logs on the agents: {logs}")


def fault_and_recover(name, fault, what):
    C.wait(name, lambda j: j.progress.step >= 9, what="step 9")
    t0 = time.time()
    fault()
    C.wait(name, lambda j: j.attempt >= 1, timeout=30, what="a recovery")
    detected = time.time() - t0
    C.wait(name, lambda j: j.state == STUBS[0].Job.RUNNING and j.attempt >= 1, timeout=60,
           what="running again")
    running = time.time() - t0
    faults = [e for e in C.events(name) if e.type == "FAULT_DETECTED"]
    kinds = [e.details["kind"] for e in faults]
    said = "; ".join(f"{e.details['kind']}: {e.message[:160]}" for e in faults)
    print(f"  {what}: fault detected {detected:.1f} s, running again {running:.1f} s after it "
          f"(heartbeat timeout 3 s); {said}")
    C.wait_state(name, "SUCCEEDED", timeout=300)
    check_equals_reference(name)
    return kinds


def placed_agent(name, rank):
    """Index of the node whose namespace runs `rank` of the job's current attempt."""
    job_id = name.split("/")[1]
    for pid in D.rank_pids(job_id):
        args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        if args[args.index(b"--rank") + 1] == str(rank).encode():
            address = args[args.index(b"--address") + 1].decode()
            return int(address.rsplit(".", 1)[1]) - 10
    raise AssertionError(f"rank {rank} of {name} not found")


def test_killed_agent_recovers_on_the_others():
    name = C.create(spec("agent-killed", 2)).name
    C.wait(name, lambda j: j.progress.step >= 2, what="step 2")
    victim = placed_agent(name, 1)
    fault_and_recover(name, lambda: AGENTS[victim].kill(), f"node-{victim} SIGKILLed")
    AGENTS[victim].wait(timeout=10)
    start_agent(victim)
    D.wait_agent_counts({"ALIVE": 3, "LOST": 0})


def test_cut_link_recovers_on_the_others():
    name = C.create(spec("link-cut", 2)).name
    C.wait(name, lambda j: j.progress.step >= 2, what="step 2")
    victim = placed_agent(name, 0)
    try:
        kinds = fault_and_recover(name, lambda: NET.cut(victim), f"node-{victim}'s link cut")
        check("AGENT_LOST" in kinds, f"fault kinds {kinds}")
    finally:
        NET.heal(victim)
    D.wait_agent_counts({"ALIVE": 3, "LOST": 0})


def test_supervisor_restart_resumes_on_the_agents():
    name = C.create(spec("supervisor-restart", 2)).name
    C.wait(name, lambda j: j.progress.step >= 9, what="step 9")
    t0 = time.time()
    D.stop(signal.SIGKILL)
    D.start()
    D.wait_agent_counts({"ALIVE": 3, "LOST": 0})
    registered = time.time() - t0
    C.wait(name, lambda j: j.state == STUBS[0].Job.RUNNING and j.attempt >= 1, timeout=60,
           what="running again")
    print(f"  supervisor SIGKILLed and restarted: agents registered again {registered:.1f} s, "
          f"the job running again {time.time() - t0:.1f} s after the kill")
    C.wait_state(name, "SUCCEEDED", timeout=300)
    # The ranks outlived the supervisor for a moment and may have checkpointed steps whose
    # reports died with it: the job must say which.
    gaps = [e for e in C.events(name) if e.type == "STEPS_UNREPORTED"]
    unreported = [s for e in gaps for s in range(int(e.details["from_step"]),
                                                 int(e.details["to_step"]) + 1)]
    if gaps:
        print(f"  {gaps[0].message}")
    check_equals_reference(name, unreported)


def test_drained_agent_moves_the_job():
    name = C.create(spec("agent-drained", 2)).name
    C.wait(name, lambda j: j.progress.step >= 9, what="step 9")
    victim = placed_agent(name, 1)
    t0 = time.time()
    AGENTS[victim].terminate()  # SIGTERM, as a node drain sends
    rc = AGENTS[victim].wait(timeout=60)
    gone = time.time() - t0
    C.wait(name, lambda j: j.state == STUBS[0].Job.RUNNING and j.attempt >= 1, timeout=60,
           what="running again")
    moved = time.time() - t0
    C.wait_state(name, "SUCCEEDED", timeout=300)
    events = C.events(name)
    faults = [e.message for e in events if e.type == "FAULT_DETECTED"]
    check(not faults, f"a drain is not a fault: {faults}")
    check(any(e.type == "AGENT_DRAINING" for e in events), "no AGENT_DRAINING event")
    check(rc == 0, f"the drained agent exited {rc}")
    steps = [int(e.metrics["step"]) for e in events if e.type == "STEP_METRICS"]
    check(len(steps) == len(set(steps)), f"steps trained twice after the drain: {sorted(steps)}")
    print(f"  node-{victim} drained (SIGTERM): agent gone {gone:.1f} s, job running elsewhere "
          f"{moved:.1f} s after the signal; no step trained twice")
    check_equals_reference(name)
    start_agent(victim)
    D.wait_agent_counts({"ALIVE": 3, "LOST": 0})


def test_agents_need_the_token():
    wrong = D.path("wrong-token")
    with open(wrong, "w") as f:
        f.write("not-the-token\n")
    r = subprocess.run(NET.run_in(2, [DELTATUNED, "agent", "--supervisor",
                                      f"{NET.supervisor_address()}:{D.port}",
                                      "--plaintext-token", "allow", "--token-file", wrong,
                                      "--hostname", "intruder", "--state-dir",
                                      D.path("intruder")]),
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 1 and "token" in r.stderr.lower(),
          f"agent with a wrong token: rc {r.returncode} {r.stderr}")
    import grpc
    from deltatune.v1 import agent_pb2, agent_pb2_grpc, rank_pb2
    bare = agent_pb2_grpc.AgentServiceStub(grpc.insecure_channel(f"127.0.0.1:{D.port}"))
    try:
        bare.AgentPoll(agent_pb2.AgentPollRequest(agent_id="x"), timeout=10)
        check(False, "AgentPoll without the token must fail")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"AgentPoll without the token: {e}")
    # With the token, an id no registration gave is unknown; a registered agent (no ranks to
    # offer, so nothing is placed on it) relaying for ranks it does not run: a report is told to
    # exit, the rendezvous store refuses.
    stub = agent_pb2_grpc.AgentServiceStub(bearer_channel(
        grpc.insecure_channel(f"127.0.0.1:{D.port}"), "cluster-secret"))
    name = C.create(spec("relay-refused", 2)).name
    C.wait(name, lambda j: j.progress.step >= 1, what="step 1")
    job = C.get(name)
    report = rank_pb2.RankReport(job=name, attempt=job.attempt, rank=0)
    try:
        stub.RelayReport(agent_pb2.RelayReportRequest(agent_id="agent-forged", report=report),
                         timeout=10)
        check(False, "a report relayed by an unknown agent must fail")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND, f"unknown agent's report: {e}")
    me = stub.RegisterAgent(agent_pb2.RegisterAgentRequest(
        info=agent_pb2.AgentInfo(hostname="bystander")), timeout=10)
    d = stub.RelayReport(agent_pb2.RelayReportRequest(
        agent_id=me.agent_id, agent_secret=me.agent_secret, report=report), timeout=10)
    check(d.action == rank_pb2.RankDirective.EXIT_NOW, f"a bystander's report answered {d}")
    try:
        stub.RelayStoreGet(agent_pb2.RelayStoreGetRequest(
            agent_id=me.agent_id, agent_secret=me.agent_secret, request=rank_pb2.StoreGetRequest(
                job=name, attempt=job.attempt, key="x")), timeout=10)
        check(False, "a bystander's store read must fail")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, f"a bystander's store read: {e}")
    C.wait_state(name, "SUCCEEDED", timeout=300)


try:
    run_tests([
        ("a job over two agents equals the one-machine run, bitwise",
         test_job_over_two_agents_equals_one_machine),
        ("an agent killed mid-job: recovered on the others", test_killed_agent_recovers_on_the_others),
        ("a link cut mid-job: recovered on the others", test_cut_link_recovers_on_the_others),
        ("the supervisor killed and restarted: resumed on the agents",
         test_supervisor_restart_resumes_on_the_agents),
        ("a drained agent (SIGTERM): the job checkpoints and moves, no fault",
         test_drained_agent_moves_the_job),
        ("agents need the token; the relay answers only for their own ranks",
         test_agents_need_the_token),
    ])
finally:
    for i, p in enumerate(AGENTS):
        if p is not None and p.poll() is not None:  # an agent no test stopped: say how it ended
            print(f"node-{i}'s agent had exited: {p.returncode}")
        if p is not None and p.poll() is None:
            p.terminate()
            p.wait(timeout=10)
    D.stop()
    NET.remove()
