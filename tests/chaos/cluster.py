"""A coordinator and N CPU workers for the chaos tests: each worker in a
network namespace of its own (hosts.py) when it can be made here, else all
on 127.0.0.1; the calling process talks to them from a "client" namespace.

    c = Cluster(workers=4, netns="auto", out=DIR)
    c.client.all_reduce(...)   # a ccl.Client, ready
    c.stop()

Binaries come from CCL_BINARY_CCCOORD / CCL_BINARY_CCWORKER (ctest sets
them), else PATH.
"""

import os
import shutil
import socket
import time
import urllib.request

import history
import hosts as hostsmod
import procs


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(address, names, timeout=1.0):
    """{name: value} of the Prometheus gauges `names` at http://ADDRESS."""
    with urllib.request.urlopen(f"http://{address}/metrics",
                                timeout=timeout) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        for name in names:
            if line.startswith(name + " "):
                out[name] = float(line.split()[1])
    return out


def binary(name):
    path = os.environ.get(f"CCL_BINARY_{name.upper()}") or shutil.which(name)
    if not path:
        raise RuntimeError(f"no {name}: set CCL_BINARY_{name.upper()}")
    return path


class Cluster:
    def __init__(self, workers, netns, out, events=None, op_timeout=3.0,
                 heartbeat_interval_ms=250, heartbeat_timeout_ms=2000,
                 seq_gap_timeout_ms=3000, ready_timeout=120, device="cpu",
                 host_ids=None):
        self.out = out
        # "cpu", or "cuda:N": every worker on GPU N, each a simulated host
        # of its own (ccworker --host-id), joined by NCCL's network transport.
        self.device = device
        # The host id each worker reports (ccworker --host-id): workers in
        # namespaces of their own that stand for ranks of one host.
        self.host_ids = host_ids
        os.makedirs(out, exist_ok=True)
        self.events = events or history.Writer(
            os.path.join(out, "daemons.jsonl"))
        self.hosts = None
        self.coord = None
        self.workers = []
        self.client = None
        self.netns = netns == "on"
        self.why_no_netns = ""
        if netns == "auto":
            self.why_no_netns = hostsmod.available()
            self.netns = not self.why_no_netns
            if self.why_no_netns:
                print(f"chaos: workers on 127.0.0.1 (no namespaces: "
                      f"{self.why_no_netns})", flush=True)
        try:
            self._start(workers, op_timeout, heartbeat_interval_ms,
                        heartbeat_timeout_ms, seq_gap_timeout_ms,
                        ready_timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, workers, op_timeout, hb_interval, hb_timeout, gap,
               ready_timeout):
        if self.netns:
            hostsmod.remove_stale()
            self.hosts = hostsmod.Hosts()
            self.hosts.add("coord", "169.254.1.1")
            self.hosts.add("client", "169.254.1.2")
            for i in range(workers):
                self.hosts.add(f"w{i}", f"169.254.2.{i + 1}")
            # This process talks to the cluster from the clients' node; done
            # before gRPC starts a thread, so that all of them live there.
            self.hosts.enter("client")
        coord_host = self.address("coord")
        # The coordinator's metrics (its KV's size across re-forms) on a port
        # of its own namespace, or a free one of this machine.
        self.metrics = f"{coord_host}:{9464 if self.netns else free_port()}"
        # Off loopback the daemons refuse plaintext unless told: these
        # namespaces reach nothing but each other.
        insecure = ["--insecure"] if self.netns else []
        self.coord = procs.Proc(
            "coord",
            [binary("cccoord"), "--world-size", str(workers),
             "--heartbeat-interval-ms", str(hb_interval),
             "--heartbeat-timeout-ms", str(hb_timeout),
             "--metrics-address", coord_host,
             "--metrics-port", self.metrics.rsplit(":", 1)[1], *insecure],
            self.out, self.events, prefix=self.prefix("coord"))
        self.coord.start(["--listen", f"{coord_host}:0"])
        port = self.coord.wait_port()
        self.coord_address = f"{coord_host}:{port}"
        # Restarts keep the address.
        self.coord.argv += ["--listen", self.coord_address]
        for i in range(workers):
            w = procs.Proc(
                f"w{i}",
                [binary("ccworker"), "--coordinator", self.coord_address,
                 "--listen", f"{self.address(f'w{i}')}:0", "--rank", str(i),
                 "--device", self.device,
                 *(["--host-id", self.host_ids[i]] if self.host_ids
                   else [] if self.device == "cpu"
                   else ["--host-id", f"simhost{i}"]),
                 "--op-timeout-ms", str(int(op_timeout * 1000)),
                 "--seq-gap-timeout-ms", str(gap), *insecure],
                self.out, self.events, prefix=self.prefix(f"w{i}"))
            self.workers.append(w)
            w.start()
        for w in self.workers:
            w.wait_port()
        import ccl
        self.ccl = ccl
        deadline = time.monotonic() + ready_timeout
        while True:
            try:
                self.client = ccl.Client(self.coord_address, timeout=10)
                break
            except ccl.CclError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.client.wait_ready(max(1.0, deadline - time.monotonic()))

    def address(self, node):
        return self.hosts.address(node) if self.netns else "127.0.0.1"

    def prefix(self, node):
        return self.hosts.exec_prefix(node) if self.netns else ()

    def logs(self):
        return "\n".join(f"--- {p.name}\n{p.log_tail()}"
                         for p in [self.coord, *self.workers] if p)

    def stop(self):
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # a dead cluster has nothing left to free
                pass
            self.client = None
        for w in self.workers:
            w.terminate()
        if self.coord is not None:
            self.coord.terminate()
        if self.hosts is not None:
            self.hosts.cleanup()
