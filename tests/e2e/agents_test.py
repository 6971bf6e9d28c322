#!/usr/bin/env python3
"""Node agents (docs/multinode.md), the part built so far: `deltatuned agent` processes register
with a supervisor deltatuned that requires a token, heartbeat, are LOST when killed, register
again when restarted (one entry per host) and when the supervisor restarts; an agent with a
wrong token is refused and exits. Observed through the supervisor's deltatune_agents series."""
import signal
import subprocess
import time

from harness import DELTATUNED, Daemon, check, run_tests

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


def test_supervisor_restart():
    D.stop()
    D.start()
    t0 = time.time()
    back = D.wait_agent_counts({"ALIVE": 2, "LOST": 0})
    print(f"  both agents registered again {back - t0:.1f} s after the restart")


try:
    run_tests([
        ("agents register with the token", test_register),
        ("an agent with a wrong token is refused and exits", test_wrong_token_refused),
        ("a killed agent turns LOST; restarted, it registers again", test_killed_agent_is_lost_and_comes_back),
        ("after a supervisor restart the agents register again", test_supervisor_restart),
    ])
finally:
    for p in AGENTS.values():
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=10)
    D.stop()
