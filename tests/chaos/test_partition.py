"""Separate hosts: three workers, each in a network namespace of its own
(hosts.py), so that Gloo's data plane crosses real interfaces. A link cut
between two of them (iptables DROP, then REJECT, inside their namespaces)
fails an all_reduce within its deadline with an error naming the
unreachable peer, and the world recovers once the link is back, with the
workers' tensors kept.

Needs root and `ip netns` (CI has both); skipped elsewhere, saying why.
"""

import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hosts  # noqa: E402

WHY = hosts.available()
pytestmark = pytest.mark.skipif(bool(WHY), reason=f"no namespaces here: {WHY}")

OP_TIMEOUT = 3.0
# Past the deadline: the diagnosis (reachability probe 0.5 s, marks 1 s) and
# a busy machine.
BOUND = 5.0


@pytest.fixture(scope="module")
def cluster():
    from cluster import Cluster
    out = tempfile.mkdtemp(prefix="chaos-partition-")
    c = Cluster(workers=3, netns="on", out=out, op_timeout=OP_TIMEOUT)
    yield c
    c.stop()
    assert not [n for n in subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        if n.startswith(c.hosts.tag)], "namespaces left behind"


def test_nothing_leaves_the_namespaces(cluster):
    for node in ("w0", "w1", "w2", "coord", "client"):
        routes = subprocess.run(
            ["ip", "-n", cluster.hosts.namespace(node), "route"],
            capture_output=True, text=True, check=True).stdout
        assert "default" not in routes, routes
        assert all(line.startswith("169.254.0.0/16")
                   for line in routes.splitlines()), routes


@pytest.mark.parametrize("mode", ["drop", "reject"])
def test_a_cut_link_names_the_peer_and_the_world_recovers(cluster, mode):
    c = cluster.client
    c.wait_ready(60)
    keep = c.from_numpy(lambda r: np.arange(4, dtype=np.int64) + 10 * r)
    t = c.tensor((1 << 16,), "float32", "rank+1")
    c.all_reduce(t)
    generation = c.generation
    a0 = cluster.address("w0")
    a1 = cluster.address("w1")
    cluster.hosts.cut("w0", "w1", mode)
    try:
        start = time.monotonic()
        with pytest.raises(cluster.ccl.CclError) as e:
            c.all_reduce(t, timeout=OP_TIMEOUT)
        took = time.monotonic() - start
        errors = e.value.errors
        assert took < OP_TIMEOUT + BOUND, took
        assert set(errors) >= {0, 1}, e.value
        for rank, (code, details) in errors.items():
            assert code.name in ("DEADLINE_EXCEEDED", "UNAVAILABLE",
                                 "ABORTED", "FAILED_PRECONDITION"), details
        # The two ends name each other, with the address that failed.
        print(e.value)
        _, d0 = errors[0]
        _, d1 = errors[1]
        assert "unreachable from rank 0" in d0 and f"rank 1 ({a1}:" in d0, d0
        assert "unreachable from rank 1" in d1 and f"rank 0 ({a0}:" in d1, d1
        # While the link is down the world cannot form again.
        time.sleep(1.0)
    finally:
        cluster.hosts.restore("w0", "w1", mode)
    start = time.monotonic()
    c.wait_ready(60, min_generation=generation + 1)
    recovered = time.monotonic() - start
    t2 = c.tensor((8,), "float32", "rank+1")
    c.all_reduce(t2)
    for r, got in t2.read().items():
        assert list(got) == [6.0] * 8, (r, got)
    for r, got in keep.read().items():
        assert list(got) == list(np.arange(4) + 10 * r), (r, got)
    print(f"{mode}: failed in {took:.2f} s, recovered {recovered:.2f} s "
          f"after the link came back (generation {c.generation})")
    for x in (keep, t, t2):
        x.free()
