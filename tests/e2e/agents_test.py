#!/usr/bin/env python3
"""Node agents registering (docs/multinode.md; jobs on them: multinode_test.py): `deltatuned
agent` processes register with a supervisor deltatuned that requires a token, heartbeat, are
LOST when killed, register again when restarted (one entry per host) and when the supervisor
restarts; an agent with a wrong token is refused and exits; a TLS supervisor is reached with
its CA file and not in plaintext. Observed through the supervisor's deltatune_agents series.

A token holder who is not the agent cannot act as one: every agent call carries the secret its
registration returned (never listed), a live agent's hostname cannot be registered away from it,
and what an agent says of itself is validated. Once, an id read from ListAgents let a probe
write a job's rendezvous store, inject its metrics and end it SUCCEEDED with an export at /etc.
An agent refuses a launch order past its capacity and keeps its state in a folder of its own (a
link or another user's folder there is refused)."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

from harness import CLI, DELTATUNED, Daemon, check, run_tests, self_signed_cert

D = Daemon(heartbeat_timeout=3)
TOKEN = D.require_token("agent-secret")
D.start()
AGENTS = {}


def agent(host, token=TOKEN):
    return subprocess.Popen([DELTATUNED, "agent", "--supervisor", f"127.0.0.1:{D.port}",
                             "--token-file", token, "--hostname", host, "--cpu-ranks", "2",
                             "--state-dir", D.path(f"agent-{host}")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_register():
    for host in ("node-a", "node-b"):
        AGENTS[host] = agent(host)
    D.wait_agent_counts({"ALIVE": 2, "LOST": 0})


def test_cli_lists_agents():
    base = [CLI, "agents", "--address", f"127.0.0.1:{D.port}", "--token-file", TOKEN]
    text = subprocess.run(base, capture_output=True, text=True, timeout=20)
    lines = text.stdout.splitlines()
    check(text.returncode == 0 and len(lines) == 2, f"deltatune agents: {text}")
    check(all("ALIVE" in l and "2 CPU rank(s)" in l for l in lines) and
          lines[0].startswith("node-a") and lines[1].startswith("node-b"), f"lines {lines}")
    listed = json.loads(subprocess.run(base + ["--output", "json"], capture_output=True,
                                       text=True, timeout=20).stdout)
    check(sorted(a["info"]["hostname"] for a in listed["agents"]) == ["node-a", "node-b"],
          f"json {listed}")
    refused = subprocess.run(base[:4], capture_output=True, text=True, timeout=20)
    check(refused.returncode == 6, f"without the token: exit {refused.returncode}")


def test_agents_json():
    req = urllib.request.Request(D.http("/v1/agents"),
                                 headers={"Authorization": "Bearer agent-secret"})
    with urllib.request.urlopen(req) as r:
        agents = json.loads(r.read())["agents"]
    got = sorted((a["info"]["hostname"], a["state"], a["info"]["cpuRanks"]) for a in agents)
    check(got == [("node-a", "ALIVE", 2), ("node-b", "ALIVE", 2)], f"/v1/agents: {got}")
    try:
        urllib.request.urlopen(D.http("/v1/agents"))
        check(False, "/v1/agents without the token must fail")
    except urllib.error.HTTPError as e:
        check(e.code == 401, f"/v1/agents without the token: {e.code}")


def test_dashboard_lists_agents():
    """/ui's jobs page shows an Agents table once agents exist (headless Chromium, when present)."""
    browser = shutil.which("chromium")
    if not browser:
        print("  skipped: no chromium")
        return
    # The page asks for the token this daemon requires: render one without auth instead.
    other = Daemon(heartbeat_timeout=3)
    other.start()
    a = subprocess.Popen([DELTATUNED, "agent", "--supervisor", f"127.0.0.1:{other.port}",
                          "--hostname", "node-ui", "--cpu-ranks", "2", "--state-dir",
                          other.path("agent")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        other.wait_agent_counts({"ALIVE": 1, "LOST": 0})
        dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                              "--virtual-time-budget=5000", "--dump-dom", other.http("/ui")],
                             capture_output=True, text=True, timeout=120).stdout
        table = re.search(r'<table id="agents">.*?</table>', dom, re.S)
        check(table and "node-ui" in table.group(0) and "ALIVE" in table.group(0),
              "the agents table on /ui")
    finally:
        a.terminate()
        a.wait(timeout=10)
        other.stop()


def test_wrong_token_refused():
    bad = D.path("bad-token")
    with open(bad, "w") as f:
        f.write("not-it\n")
    p = agent("node-x", bad)
    out, _ = p.communicate(timeout=20)
    check(p.returncode == 1 and "register" in out, f"exit {p.returncode}: {out}")
    check(D.agent_counts() == {"ALIVE": 2, "LOST": 0}, f"refused agent counted: {D.agent_counts()}")


def test_agent_says_goodbye():
    """SIGTERM: the agent leaves the list at once, not LOST after the heartbeat timeout (3 s)."""
    p = agent("node-bye")
    try:
        D.wait_agent_counts({"ALIVE": 3, "LOST": 0})
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        start = time.time()
        D.wait_agent_counts({"ALIVE": 2, "LOST": 0}, timeout=2)
        print(f"  gone {time.time() - start:.2f} s after the agent exited")
    finally:
        if p.poll() is None:
            p.kill()


def agent_stub():
    import tempfile
    import grpc
    from harness import bearer_channel, load_stubs
    load_stubs(tempfile.mkdtemp(prefix="deltatune-stubs-"))
    from deltatune.v1 import agent_pb2, agent_pb2_grpc, rank_pb2
    token = open(TOKEN).read().strip()
    channel = bearer_channel(grpc.insecure_channel(f"127.0.0.1:{D.port}"), token)
    return grpc, agent_pb2, rank_pb2, agent_pb2_grpc.AgentServiceStub(channel)


def test_a_token_holder_cannot_act_as_an_agent():
    grpc, pb, rank_pb, stub = agent_stub()
    listed = stub.ListAgents(pb.ListAgentsRequest(), timeout=10).agents
    check(len(listed) == 2, f"agents {listed}")
    victim = listed[0].agent_id
    probes = {
        "AgentHeartbeat": lambda s: stub.AgentHeartbeat(
            pb.AgentHeartbeatRequest(agent_id=victim, agent_secret=s), timeout=10),
        "AgentPoll": lambda s: stub.AgentPoll(
            pb.AgentPollRequest(agent_id=victim, agent_secret=s), timeout=10),
        "RelayStoreSet": lambda s: stub.RelayStoreSet(pb.RelayStoreSetRequest(
            agent_id=victim, agent_secret=s,
            request=rank_pb.StoreSetRequest(job="000000000000", attempt=1, key="k", value=b"v")),
            timeout=10),
        "RelayReport": lambda s: stub.RelayReport(pb.RelayReportRequest(
            agent_id=victim, agent_secret=s, report=rank_pb.RankReport(job="000000000000")),
            timeout=10),
    }
    for name, call in probes.items():
        for secret in ("", "0" * 32):
            try:
                call(secret)
                raise AssertionError(f"{name} with secret '{secret}' accepted")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.PERMISSION_DENIED,
                      f"{name}: {e.code()} {e.details()}")
    # A live agent's hostname cannot be taken over; odd machines are refused.
    host = listed[0].info.hostname
    try:
        stub.RegisterAgent(pb.RegisterAgentRequest(info=pb.AgentInfo(hostname=host)), timeout=10)
        raise AssertionError("a live agent's hostname was registered again")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.ALREADY_EXISTS, f"{e.code()} {e.details()}")
    for info in (pb.AgentInfo(hostname="x" * (1 << 20)), pb.AgentInfo(hostname="a\0b"),
                 pb.AgentInfo(hostname="big", cpu_ranks=2**31 - 1),
                 pb.AgentInfo(hostname="gpus", gpus=[pb.AgentGpu(index=i) for i in range(10000)])):
        try:
            stub.RegisterAgent(pb.RegisterAgentRequest(info=info), timeout=10)
            raise AssertionError(f"registered {info.hostname[:20]}")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{e.code()} {e.details()[:200]}")
    after = stub.ListAgents(pb.ListAgentsRequest(), timeout=10).agents
    check([a.agent_id for a in after] == [a.agent_id for a in listed], f"agents now {after}")
    check("secret" not in str(after).lower(), "ListAgents shows a secret")
    check(D.agent_counts() == {"ALIVE": 2, "LOST": 0}, f"agents {D.agent_counts()}")


def test_agent_refuses_orders_past_its_capacity():
    """A supervisor (a fake one here) orders 40 ranks from an agent that offers 4: the agent
    starts none and reports each refused, carrying its secret on every poll."""
    import tempfile
    from concurrent import futures
    import grpc
    grpc_, pb, _, _ = agent_stub()
    from deltatune.v1 import agent_pb2_grpc, job_pb2
    polls, exits = [], []

    class FakeSupervisor(agent_pb2_grpc.AgentServiceServicer):
        def RegisterAgent(self, request, context):
            return pb.RegisterAgentResponse(agent_id="agent-fake", agent_secret="s" * 32,
                                            heartbeat_seconds=1)

        def AgentPoll(self, request, context):
            polls.append((request.agent_id, request.agent_secret))
            exits.extend(request.exits)
            if len(polls) != 1:
                return pb.AgentPollResponse()
            spec = job_pb2.JobSpec(resources=job_pb2.Resources(cpu_ranks=40))
            return pb.AgentPollResponse(launches=[pb.LaunchOrder(
                job="000000000001", attempt=0, world=40, ranks=list(range(40)),
                spec=spec.SerializeToString())])

    server = grpc_.server(futures.ThreadPoolExecutor(max_workers=4))
    agent_pb2_grpc.add_AgentServiceServicer_to_server(FakeSupervisor(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    state = tempfile.mkdtemp(prefix="deltatune-agent-")
    p = subprocess.Popen([DELTATUNED, "agent", "--supervisor", f"127.0.0.1:{port}", "--hostname",
                          "small-node", "--cpu-ranks", "4", "--state-dir", state],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 20
        while len(exits) < 40 and time.time() < deadline:
            time.sleep(0.1)
    finally:
        p.terminate()
        out = p.communicate(timeout=20)[0]
        server.stop(0)
    check(len(exits) == 40 and all(e.exit_code == 127 for e in exits),
          f"{len(exits)} refusals reported: {exits[:2]}; agent said: {out}")
    check("exceed this node's 4" in out, f"agent said: {out}")
    check(all(secret == "s" * 32 for _, secret in polls), f"polls {polls[:3]}")
    started = [f for _, _, files in os.walk(state) for f in files if f.startswith("rank-")]
    check(not started, f"ranks started: {started}")
    shutil.rmtree(state, ignore_errors=True)


def test_agent_state_dir_is_its_own():
    """The agent's folder is this user's alone: created 0700; a link there, or another user's
    folder, is refused before the agent registers."""
    def run_agent(state, env=None):
        return subprocess.run([DELTATUNED, "agent", "--supervisor", f"127.0.0.1:{D.port}",
                               "--token-file", TOKEN, "--hostname", "node-dir", "--state-dir",
                               state], capture_output=True, text=True, timeout=20, env=env)

    target = D.path("elsewhere")
    os.makedirs(target)
    link = D.path("state-link")
    os.symlink(target, link)
    r = run_agent(link)
    check(r.returncode == 2 and "symbolic link" in r.stderr, f"a link: {r.returncode} {r.stderr}")
    foreign = D.path("foreign")
    os.makedirs(foreign)
    if os.geteuid() == 0:
        os.chown(foreign, 12345, 12345)
        r = run_agent(foreign)
        check(r.returncode == 2 and "owned by uid 12345" in r.stderr,
              f"another user's folder: {r.returncode} {r.stderr}")
    check(D.agent_counts() == {"ALIVE": 2, "LOST": 0}, f"agents {D.agent_counts()}")
    # The default: under the user's own state root, created 0700 (here a fresh HOME).
    home = D.path("home")
    os.makedirs(home)
    env = dict(os.environ, HOME=home)
    env.pop("XDG_STATE_HOME", None)
    p = subprocess.Popen([DELTATUNED, "agent", "--supervisor", f"127.0.0.1:{D.port}",
                          "--token-file", TOKEN, "--hostname", "node-dir"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        D.wait_agent_counts({"ALIVE": 3, "LOST": 0})
        want = ("/var/lib/deltatune-agent/node-dir" if os.geteuid() == 0
                else os.path.join(home, ".local/state/deltatune/agent-node-dir"))
        mode = os.stat(want).st_mode & 0o777
        check(mode == 0o700, f"{want} mode {oct(mode)}")
    finally:
        p.terminate()
        p.wait(timeout=20)
        if os.geteuid() == 0:
            shutil.rmtree("/var/lib/deltatune-agent/node-dir", ignore_errors=True)


def test_killed_agent_is_lost_and_comes_back():
    AGENTS["node-b"].send_signal(signal.SIGKILL)
    AGENTS["node-b"].wait()
    t0 = time.time()
    lost_at = D.wait_agent_counts({"ALIVE": 1, "LOST": 1})
    print(f"  node-b LOST {lost_at - t0:.1f} s after the kill (heartbeat timeout 3 s)")
    AGENTS["node-b"] = agent("node-b")
    D.wait_agent_counts({"ALIVE": 2, "LOST": 0})  # the host's new entry replaces the lost one


def test_agent_over_tls():
    other = Daemon(heartbeat_timeout=3)
    token = other.require_token("tls-secret")
    cert, key = self_signed_cert(other.root)
    other.enable_tls(cert, key)
    other.start()
    base = [DELTATUNED, "agent", "--supervisor", f"127.0.0.1:{other.port}", "--token-file", token,
            "--hostname", "node-tls", "--state-dir", other.path("agent")]
    plain = subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    secure = None
    try:
        time.sleep(2)  # a plaintext agent cannot talk to a TLS supervisor: it keeps trying
        check(other.agent_counts() == {"ALIVE": 0, "LOST": 0},
              f"plaintext agent registered: {other.agent_counts()}")
        plain.terminate()
        plain.wait(timeout=10)
        secure = subprocess.Popen(base + ["--ca-file", cert], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        other.wait_agent_counts({"ALIVE": 1, "LOST": 0})
        missing = subprocess.run(base + ["--ca-file", other.path("none.pem")],
                                 capture_output=True, text=True, timeout=20)
        check(missing.returncode == 2 and "--ca-file" in missing.stderr,
              f"missing CA file: exit {missing.returncode}: {missing.stderr}")
    finally:
        for p in (plain, secure):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
        other.stop()


def test_supervisor_restart():
    D.stop()
    D.start()
    t0 = time.time()
    back = D.wait_agent_counts({"ALIVE": 2, "LOST": 0})
    print(f"  both agents registered again {back - t0:.1f} s after the restart")


try:
    run_tests([
        ("agents register with the token", test_register),
        ("`deltatune agents` lists them", test_cli_lists_agents),
        ("GET /v1/agents lists them, with the token only", test_agents_json),
        ("the dashboard lists the agents", test_dashboard_lists_agents),
        ("an agent with a wrong token is refused and exits", test_wrong_token_refused),
        ("an agent stopped by SIGTERM leaves the list at once", test_agent_says_goodbye),
        ("a token holder cannot act as an agent", test_a_token_holder_cannot_act_as_an_agent),
        ("an agent refuses orders past its capacity", test_agent_refuses_orders_past_its_capacity),
        ("a killed agent turns LOST; restarted, it registers again", test_killed_agent_is_lost_and_comes_back),
        ("an agent reaches a TLS supervisor with its CA file", test_agent_over_tls),
        ("after a supervisor restart the agents register again", test_supervisor_restart),
        ("an agent's state folder is its own", test_agent_state_dir_is_its_own),
    ])
finally:
    for p in AGENTS.values():
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=10)
    D.stop()
