#!/usr/bin/env python3
"""Node agents on their own network (docs/multinode.md): each agent runs in its own network
namespace, joined to the supervisor by a bridge the test creates (addresses on a private /24,
removed at the end), so the supervisor sees them as separate machines. Registration over the
bridge (the token sent in plaintext only where allowed), a cut link (the agent's veth taken down) turning the agent LOST within the heartbeat
timeout, and the agent registered again once the link is back. Exits 77 (skipped) where network
namespaces cannot be made (no root or no CAP_NET_ADMIN)."""
import subprocess
import sys
import time

from harness import DELTATUNED, Daemon, check, run_tests
from netns import Network

NET = Network(3, 213)
NAMESPACES = NET.namespaces

if not NET.make():
    NET.remove()
    print("SKIP: cannot create network namespaces here (needs CAP_NET_ADMIN)")
    sys.exit(77)

D = Daemon(heartbeat_timeout=3)
TOKEN = D.require_token("agent-secret")
with open(D.config) as f:  # listen on every address: the bridge's too (hence the token)
    config = f.read()
with open(D.config, "w") as f:
    f.write(config.replace("grpc: 127.0.0.1:", "grpc: 0.0.0.0:"))
AGENTS = []


def test_agents_register_over_the_bridge():
    D.start()
    for i in range(len(NAMESPACES)):
        AGENTS.append(subprocess.Popen(
            NET.run_in(i, [DELTATUNED, "agent", "--supervisor",
                           f"{NET.supervisor_address()}:{D.port}", "--token-file", TOKEN,
                           "--plaintext-token", "allow", "--hostname", f"node-{i}", "--address",
                           NET.address(i), "--cpu-ranks", "1", "--state-dir",
                           D.path(f"agent-{i}")]),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    D.wait_agent_counts({"ALIVE": 3, "LOST": 0})
    # Inside a namespace the supervisor is not on loopback: the bridge carried the registrations.
    probe = ("import socket, sys\n"
             "try:\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)\n"
             "except OSError:\n    sys.exit(3)\n")
    r = subprocess.run(["ip", "netns", "exec", NAMESPACES[0], sys.executable, "-c", probe,
                        str(D.port)], capture_output=True, text=True, timeout=10)
    check(r.returncode == 3, f"loopback inside the namespace reached the supervisor: {r}")


def test_no_plaintext_token_over_the_network():
    """Over the bridge without TLS, an agent sends its token only when told it may."""
    r = subprocess.run(NET.run_in(2, [DELTATUNED, "agent", "--supervisor",
                                      f"{NET.supervisor_address()}:{D.port}", "--token-file",
                                      TOKEN, "--hostname", "careful", "--state-dir",
                                      D.path("careful")]),
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "plaintext" in r.stderr and "--ca-file" in r.stderr,
          f"agent to {NET.supervisor_address()} without TLS: rc {r.returncode} {r.stderr}")
    check(D.agent_counts() == {"ALIVE": 3, "LOST": 0}, f"agents {D.agent_counts()}")


def test_cut_link_is_lost_and_heals():
    t0 = time.time()
    NET.cut(1)
    lost = D.wait_agent_counts({"ALIVE": 2, "LOST": 1})
    print(f"  node-1 LOST {lost - t0:.1f} s after its link was cut (heartbeat timeout 3 s)")
    t1 = time.time()
    NET.heal(1)
    back = D.wait_agent_counts({"ALIVE": 3, "LOST": 0})
    print(f"  node-1 ALIVE again {back - t1:.1f} s after the link came back")


try:
    run_tests([
        ("three agents in their own namespaces register over a bridge",
         test_agents_register_over_the_bridge),
        ("no token in plaintext over the network unless allowed",
         test_no_plaintext_token_over_the_network),
        ("a cut link: the agent is LOST, then back", test_cut_link_is_lost_and_heals),
    ])
finally:
    for p in AGENTS:
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=10)
    D.stop()
    NET.remove()
