#!/usr/bin/env python3
"""Node agents on their own network (docs/multinode.md): each agent runs in its own network
namespace, joined to the supervisor by a bridge the test creates (addresses on a private /24,
removed at the end), so the supervisor sees them as separate machines. Registration over the
bridge, a cut link (the agent's veth taken down) turning the agent LOST within the heartbeat
timeout, and the agent registered again once the link is back. Exits 77 (skipped) where network
namespaces cannot be made (no root or no CAP_NET_ADMIN)."""
import os
import subprocess
import sys
import time

from harness import DELTATUNED, Daemon, check, run_tests

TAG = str(os.getpid() % 100000)
BRIDGE, NET = f"dtbr{TAG}", "10.213.0"
NAMESPACES = [f"dt{TAG}a{i}" for i in range(3)]
VETHS = [f"dtv{TAG}{i}" for i in range(3)]


def ip(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def make_network():
    """A bridge at NET.1 and one namespace per agent at NET.(10 + i), each with a veth into it."""
    if ip("link", "add", BRIDGE, "type", "bridge").returncode != 0:
        return False
    ip("addr", "add", f"{NET}.1/24", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    for i, (ns, veth) in enumerate(zip(NAMESPACES, VETHS)):
        for args in (["netns", "add", ns], ["link", "add", veth, "type", "veth", "peer", "name",
                                             "eth0", "netns", ns],
                     ["link", "set", veth, "master", BRIDGE], ["link", "set", veth, "up"]):
            r = ip(*args)
            if r.returncode != 0:
                raise RuntimeError(f"ip {' '.join(args)}: {r.stderr}")
        ip("addr", "add", f"{NET}.{10 + i}/24", "dev", "eth0", ns=ns)
        ip("link", "set", "eth0", "up", ns=ns)
        ip("link", "set", "lo", "up", ns=ns)
    return True


def remove_network():
    for ns, veth in zip(NAMESPACES, VETHS):
        ip("link", "del", veth)
        ip("netns", "del", ns)
    ip("link", "del", BRIDGE)


if not make_network():
    remove_network()
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
    for i, ns in enumerate(NAMESPACES):
        AGENTS.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, DELTATUNED, "agent", "--supervisor", f"{NET}.1:{D.port}",
             "--token-file", TOKEN, "--hostname", f"node-{i}", "--address", f"{NET}.{10 + i}",
             "--cpu-ranks", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    D.wait_agent_counts({"ALIVE": 3, "LOST": 0})
    # Inside a namespace the supervisor is not on loopback: the bridge carried the registrations.
    probe = ("import socket, sys\n"
             "try:\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)\n"
             "except OSError:\n    sys.exit(3)\n")
    r = subprocess.run(["ip", "netns", "exec", NAMESPACES[0], sys.executable, "-c", probe,
                        str(D.port)], capture_output=True, text=True, timeout=10)
    check(r.returncode == 3, f"loopback inside the namespace reached the supervisor: {r}")


def test_cut_link_is_lost_and_heals():
    t0 = time.time()
    ip("link", "set", VETHS[1], "down")
    lost = D.wait_agent_counts({"ALIVE": 2, "LOST": 1})
    print(f"  node-1 LOST {lost - t0:.1f} s after its link was cut (heartbeat timeout 3 s)")
    t1 = time.time()
    ip("link", "set", VETHS[1], "up")
    back = D.wait_agent_counts({"ALIVE": 3, "LOST": 0})
    print(f"  node-1 ALIVE again {back - t1:.1f} s after the link came back")


try:
    run_tests([
        ("three agents in their own namespaces register over a bridge",
         test_agents_register_over_the_bridge),
        ("a cut link: the agent is LOST, then back", test_cut_link_is_lost_and_heals),
    ])
finally:
    for p in AGENTS:
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=10)
    D.stop()
    remove_network()
