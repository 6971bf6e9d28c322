#!/usr/bin/env python3
"""Node agents registering (docs/multinode.md; jobs on them: multinode_test.py): `deltatuned
agent` processes register with a supervisor deltatuned that requires a token, heartbeat, are
LOST when killed, register again when restarted (one entry per host) and when the supervisor
restarts; an agent with a wrong token is refused and exits; a TLS supervisor is reached with
its CA file and not in plaintext. Observed through the supervisor's deltatune_agents series."""
import json
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
                             "--token-file", token, "--hostname", host, "--cpu-ranks", "2"],
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
                          "--hostname", "node-ui", "--cpu-ranks", "2"],
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
        ("a killed agent turns LOST; restarted, it registers again", test_killed_agent_is_lost_and_comes_back),
        ("an agent reaches a TLS supervisor with its CA file", test_agent_over_tls),
        ("after a supervisor restart the agents register again", test_supervisor_restart),
    ])
finally:
    for p in AGENTS.values():
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=10)
    D.stop()
