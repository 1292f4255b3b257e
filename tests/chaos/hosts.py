"""Separate hosts on one machine: a network namespace per node, made and
removed by the test itself.

    hub ns:   bridge br0 (no address), one veth end per node
    node ns:  lo, eth0 (the other veth end) with a link-local address from
              169.254.0.0/16 the test assigns; no default route

Nothing leaves these namespaces: the bridge lives in the hub namespace, which
has no link to the machine's own namespace, and no node has a route beyond
169.254.0.0/16. So the Gloo data plane between two workers crosses real
interfaces (two veths and a bridge), and a link between two nodes can be cut
with iptables inside their namespaces (DROP: packets vanish, the peers time
out; REJECT: the sender gets a TCP reset or an ICMP error at once), then
restored. The kernel here has no netem, so faults are drops, not delays.

Needs root (CAP_NET_ADMIN) and `ip`/`iptables`; available() says whether
this process can. Namespaces are named cclchaos-<pid>-<node>; cleanup() runs
at exit, and remove_stale() removes those of processes that are gone (a run
killed with SIGKILL cannot clean up after itself).
"""

import atexit
import ctypes
import os
import re
import shutil
import subprocess

CLONE_NEWNET = 0x40000000
PREFIX = "cclchaos"


def _run(*argv, check=True):
    r = subprocess.run(list(argv), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: "
                           f"{r.stderr.strip()}")
    return r


def available():
    """'' when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"no {tool}"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    r = _run("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"ip netns add: {r.stderr.strip()}"
    try:
        r = _run("ip", "netns", "exec", probe, "iptables", "-L", "-n",
                 check=False)
        if r.returncode != 0:
            return f"iptables in a namespace: {r.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return ""


def remove_stale():
    """Deletes namespaces left by chaos runs whose process is gone."""
    r = _run("ip", "netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{PREFIX}-(\d+)-.+", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _run("ip", "netns", "del", name, check=False)


class Hosts:
    """A hub and named nodes, each with its own address."""

    def __init__(self):
        self.tag = f"{PREFIX}-{os.getpid()}"
        self.hub = f"{self.tag}-hub"
        self.nodes = {}      # node -> (namespace, address)
        self.cuts = set()    # (a, b, mode) currently installed
        self._made = []
        atexit.register(self.cleanup)
        _run("ip", "netns", "add", self.hub)
        self._made.append(self.hub)
        self._ip(self.hub, "link", "add", "br0", "type", "bridge")
        self._ip(self.hub, "link", "set", "br0", "up")
        self._ip(self.hub, "link", "set", "lo", "up")

    @staticmethod
    def _ip(ns, *args):
        return _run("ip", "-n", ns, *args)

    def add(self, node, address):
        ns = f"{self.tag}-{node}"
        port = f"v{len(self.nodes)}"
        _run("ip", "netns", "add", ns)
        self._made.append(ns)
        self._ip(ns, "link", "set", "lo", "up")
        self._ip(ns, "link", "add", "eth0", "type", "veth", "peer", "name",
                 port, "netns", self.hub)
        self._ip(self.hub, "link", "set", port, "master", "br0")
        self._ip(self.hub, "link", "set", port, "up")
        self._ip(ns, "addr", "add", f"{address}/16", "dev", "eth0")
        self._ip(ns, "link", "set", "eth0", "up")
        self.nodes[node] = (ns, address)
        return ns

    def namespace(self, node):
        return self.nodes[node][0]

    def address(self, node):
        return self.nodes[node][1]

    def exec_prefix(self, node):
        """argv prefix that runs a command in the node's namespace. `ip
        netns exec` execs the command in place, so the pid Popen returns is
        the command's own (signals reach it, not a wrapper)."""
        return ["ip", "netns", "exec", self.namespace(node)]

    def enter(self, node):
        """Moves the calling thread into the node's namespace. Called on the
        main thread before any other starts (threads inherit it), so that
        this process's gRPC channels live there too."""
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = os.open(f"/var/run/netns/{self.namespace(node)}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                e = ctypes.get_errno()
                raise OSError(e, f"setns: {os.strerror(e)}")
        finally:
            os.close(fd)

    def _rules(self, a, b, mode):
        """iptables rules (in a's namespace) that cut a from b."""
        peer = self.address(b)
        if mode == "drop":
            return [["INPUT", "-s", peer, "-j", "DROP"],
                    ["OUTPUT", "-d", peer, "-j", "DROP"]]
        # REJECT: TCP gets a reset, anything else an ICMP error.
        return [["INPUT", "-s", peer, "-p", "tcp", "-j", "REJECT",
                 "--reject-with", "tcp-reset"],
                ["OUTPUT", "-d", peer, "-p", "tcp", "-j", "REJECT",
                 "--reject-with", "tcp-reset"],
                ["INPUT", "-s", peer, "-j", "REJECT"],
                ["OUTPUT", "-d", peer, "-j", "REJECT"]]

    def cut(self, a, b, mode="drop"):
        """Cuts the link between nodes a and b, both ways."""
        for x, y in ((a, b), (b, a)):
            for rule in self._rules(x, y, mode):
                _run("ip", "netns", "exec", self.namespace(x), "iptables",
                     "-w", "-I", *rule)
        self.cuts.add((a, b, mode))

    def restore(self, a, b, mode="drop"):
        for x, y in ((a, b), (b, a)):
            for rule in self._rules(x, y, mode):
                _run("ip", "netns", "exec", self.namespace(x), "iptables",
                     "-w", "-D", *rule, check=False)
        self.cuts.discard((a, b, mode))

    def cleanup(self):
        for ns in reversed(self._made):
            _run("ip", "netns", "del", ns, check=False)
        self._made.clear()
