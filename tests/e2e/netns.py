"""Separate machines on one host for the multi-node tests: one network namespace per node, each
with a veth into a bridge the test creates (addresses on a private /24), removed at the end.
Needs root or CAP_NET_ADMIN; `Network.make()` returns False where namespaces cannot be made."""
import os
import subprocess


def ip(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    return subprocess.run(cmd, capture_output=True, text=True)


class Network:
    """A bridge at NET.1 (the supervisor's side) and `nodes` namespaces at NET.(10 + i), where NET
    is 10.<from the pid>.<subnet>: concurrent test runs get different networks."""

    def __init__(self, nodes, subnet):
        tag = str(os.getpid() % 100000)
        self.net = f"10.{100 + os.getpid() % 100}.{subnet}"
        self.bridge = f"dtbr{tag}"
        self.namespaces = [f"dt{tag}n{i}" for i in range(nodes)]
        self.veths = [f"dtv{tag}{i}" for i in range(nodes)]

    def supervisor_address(self):
        return f"{self.net}.1"

    def address(self, i):
        return f"{self.net}.{10 + i}"

    def make(self):
        if ip("link", "add", self.bridge, "type", "bridge").returncode != 0:
            return False
        ip("addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for i, (ns, veth) in enumerate(zip(self.namespaces, self.veths)):
            for args in (["netns", "add", ns],
                         ["link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
                         ["link", "set", veth, "master", self.bridge], ["link", "set", veth, "up"]):
                r = ip(*args)
                if r.returncode != 0:
                    raise RuntimeError(f"ip {' '.join(args)}: {r.stderr}")
            ip("addr", "add", f"{self.address(i)}/24", "dev", "eth0", ns=ns)
            ip("link", "set", "eth0", "up", ns=ns)
            ip("link", "set", "lo", "up", ns=ns)
        return True

    def remove(self):
        for ns, veth in zip(self.namespaces, self.veths):
            ip("link", "del", veth)
            ip("netns", "del", ns)
        ip("link", "del", self.bridge)

    def cut(self, i):
        """Drops node i's traffic from inside its namespace: its interface goes down, so nothing
        enters or leaves (the processes in it keep running)."""
        ip("link", "set", "eth0", "down", ns=self.namespaces[i])

    def heal(self, i):
        ip("link", "set", "eth0", "up", ns=self.namespaces[i])

    def run_in(self, i, argv):
        """argv run inside node i's namespace."""
        return ["ip", "netns", "exec", self.namespaces[i], *argv]
