"""Failures are CclError exceptions with the gRPC code, the rank and the
worker's message; nothing waits past the timeout it was given."""

import logging
import socket
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest

import ccl
from ccl.v1 import worker_pb2
from conftest import WORKERS, _ClusterGuard, start_cluster

RANKS = list(range(WORKERS))


def test_unknown_tensor_is_not_found_on_every_rank(client):
    with pytest.raises(ccl.CclError) as e:
        client.all_reduce("py-no-such-tensor")
    err = e.value
    assert err.code == grpc.StatusCode.NOT_FOUND
    assert err.rank == 0
    assert sorted(err.errors) == RANKS
    assert "py-no-such-tensor" in err.details
    assert str(err).startswith("NOT_FOUND: rank 0: ")
    # The refused op took its seq everywhere: the next one runs at once.
    with client.ones(1) as t:
        client.all_reduce(t)
        assert t.read(0)[0] == WORKERS


def test_shape_mismatch_across_ranks(client):
    # Rank 0 holds 4 elements, the others 8: the ranks compare the op
    # before any data moves and all refuse it.
    with client.zeros(4, ranks=[0], name="py-mismatch") as small, \
            client.zeros(8, ranks=RANKS[1:], name="py-mismatch") as big:
        with pytest.raises(ccl.CclError) as e:
            client.all_reduce("py-mismatch")
        err = e.value
        assert err.code == grpc.StatusCode.INVALID_ARGUMENT
        assert sorted(err.errors) == RANKS
        assert "ranks disagree" in err.details
        assert "4 float32" in err.details and "8 float32" in err.details
        del small, big


def test_bad_input_is_refused_before_any_rpc(client):
    with pytest.raises(ccl.InvalidArgument):
        client.tensor(3, "complex128")
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        client.tensor(3, fill="sparkles")
    with pytest.raises(ccl.InvalidArgument) as e:
        client.broadcast("x", src=WORKERS)
    assert "out of range" in str(e.value)
    with client.zeros(3) as t:
        with pytest.raises(ccl.InvalidArgument) as e:
            t.write(np.zeros(4))
        assert "shape [3]" in str(e.value)
        with pytest.raises(ccl.InvalidArgument):
            client.all_reduce(t, op="median")
        with pytest.raises(ccl.InvalidArgument):
            client.all_reduce(t, op=ccl.ReduceOp.SUM, scale=2.0)
        with pytest.raises(TypeError):
            client.all_gather([t, t], t)
        with pytest.raises(ccl.InvalidArgument):
            client.send(t, dst=0, src=0)
    with pytest.raises(ccl.InvalidArgument) as e:
        t.read(0)
    with pytest.raises(ccl.InvalidArgument):
        client.all_reduce(t)  # freed


def test_request_limit_names_its_flag(client):
    with pytest.raises(ccl.CclError) as e:
        client.zeros((1,) * 9)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "--max-shape-rank" in e.value.details


def test_bad_name_is_refused_by_the_worker(client):
    # The worker's own validation, not the client's.
    with pytest.raises(ccl.CclError) as e:
        client.tensor(2, name="bad name with spaces")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "character" in e.value.details


def test_over_quota_names_the_limit():
    from conftest import start_cluster
    with start_cluster(worker_args=["--quota-bytes", "4096"]) as cluster:
        with ccl.Client(cluster.coordinator) as c:
            with pytest.raises(ccl.CclError) as e:
                c.zeros(2048)  # 8 KiB of float32
            assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "quota of 4096 bytes" in e.value.details
            # Nothing is left half-made on any rank.
            for r in RANKS:
                assert c.list_tensors(r) == []


def test_lone_recv_times_out_and_the_world_recovers(fresh_cluster):
    with ccl.Client(fresh_cluster.coordinator, timeout=30) as c:
        generation = c.generation
        with c.zeros(3) as t:
            start = time.monotonic()
            with pytest.raises(ccl.CclError) as e:
                c.recv(t, src=0, dst=1, timeout=2)
            elapsed = time.monotonic() - start
            err = e.value
            assert err.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert err.rank == 1
            assert "no matching send" in err.details
            # Bounded: the RPC's own deadline is the op's timeout plus the
            # margin; the slack is for a busy machine, not a speed claim.
            assert elapsed < 2 + ccl._client.RPC_MARGIN_S + 30
            # The broken connection makes the world re-form by itself;
            # tensors stay.
            c.wait_ready(60, min_generation=generation + 1)
            assert c.generation > generation
            t.write(np.ones(3))
            c.all_reduce(t)
            np.testing.assert_array_equal(t.read(1), [WORKERS] * 3)


def test_the_op_after_a_lone_recv_just_works(fresh_cluster, caplog):
    """Issue 42: no wait_ready, no retry. The op after the failure waits for
    the re-formed world within its own timeout and says so in one line."""
    caplog.set_level(logging.WARNING, logger="ccl")
    with ccl.Client(fresh_cluster.coordinator, timeout=30) as c:
        generation = c.generation
        with c.zeros(3) as t:
            with pytest.raises(ccl.CclError) as e:
                c.recv(t, src=0, dst=1, timeout=2)
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            c.all_reduce(t)  # zeros: the sum is zeros on every rank
            assert c.generation > generation
            t.write(np.ones(3))
            c.all_reduce(t)
            np.testing.assert_array_equal(t.read(1), [WORKERS] * 3)
    lines = [r.getMessage() for r in caplog.records if r.name == "ccl"]
    assert len(lines) == 1, lines
    assert "world re-forming after rank 1's communicator broke" in lines[0]
    assert "waited" in lines[0]


def test_the_subgroup_op_after_a_lone_recv_just_works(fresh_cluster):
    """Issue 42, for a subgroup: sent at once after the failure, with no
    wait and no retry, the subgroup's all_reduce runs in the re-formed
    world with the right sum."""
    with ccl.Client(fresh_cluster.coordinator, timeout=30) as c:
        generation = c.generation
        pair = c.new_group([0, 1])
        with c.full(4, 1.0, ranks=[0, 1]) as g, c.zeros(3) as t:
            with pytest.raises(ccl.CclError) as e:
                c.recv(t, src=0, dst=1, timeout=2)
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            c.all_reduce(g, group=pair)
            assert c.generation > generation
            for rank in (0, 1):
                np.testing.assert_array_equal(g.read(rank), [2.0] * 4)


def test_the_op_after_an_op_timeout_just_works(fresh_cluster):
    """Issue 42, after an op timeout: an all_reduce one rank never joined
    (sent to the others only, through the client's own submit) times out;
    the next all_reduce runs in the re-formed world, no retry."""
    with ccl.Client(fresh_cluster.coordinator, timeout=30) as c:
        generation = c.generation
        with c.ones(4) as t:
            joined = {r: worker_pb2.OpRequest(
                kind=worker_pb2.OP_KIND_ALL_REDUCE, input=t.name)
                for r in RANKS[:-1]}
            with pytest.raises(ccl.CclError) as e:
                c._submit("all_reduce", c._group(None), joined, False, 1.5)
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            t.write(np.ones(4))  # what the timed-out op left is undefined
            c.all_reduce(t)
            assert c.generation > generation
            for rank in RANKS:
                np.testing.assert_array_equal(t.read(rank), [WORKERS] * 4)


def test_a_worker_killed_and_replaced_at_once(fresh_cluster):
    """Issue 42: kill -9 a worker and start its replacement at once (a
    container restart, with no rank named). The replacement takes the dead
    worker's rank, the client that knew the old world runs the next
    all_reduce without a retry, and the survivors keep their tensors."""
    victim = WORKERS - 1
    with ccl.Client(fresh_cluster.coordinator, timeout=30) as c:
        generation = c.generation
        keep = c.full(4, 7.0)
        fresh_cluster.replace_worker(victim)
        # The user's next command comes once the replacement is up: a fresh
        # client makes the tensor; the old one runs the all_reduce.
        with ccl.Client(fresh_cluster.coordinator, timeout=30) as probe:
            probe.wait_ready(60, min_generation=generation + 1)
            x = probe.full(4, 1.0)
            c.all_reduce(x.name)
            assert c.generation > generation
            for rank in RANKS:
                np.testing.assert_array_equal(x.read(rank), [WORKERS] * 4)
        for rank in RANKS:
            if rank != victim:
                np.testing.assert_array_equal(keep.read(rank), [7.0] * 4)


# A client that reserves 64 seqs of the world under its lease and never
# sends them, then waits to be killed: a script killed mid-loop.
_SEQ_HOLDER = """
import sys, time, ccl
c = ccl.Client(sys.argv[1], timeout=30)
first, _ = c._seqs._reserve("world", 64)
print("reserved", first, flush=True)
time.sleep(600)
"""


def test_a_client_killed_holding_seqs_does_not_stall_the_others(request):
    """Issue 42: a client killed with -9 while it holds reserved seqs costs
    the others nothing. The workers' gap timeout here is far past the op's
    own timeout, so an op that waited on the dead client's seqs would fail;
    it runs because the coordinator ends the dead client's lease and the
    workers skip its seqs."""
    c = start_cluster(worker_args=["--seq-gap-timeout-ms", "600000"])
    guard = _ClusterGuard(request, c)
    try:
        holder = subprocess.Popen(
            [sys.executable, "-c", _SEQ_HOLDER, c.coordinator],
            stdout=subprocess.PIPE, text=True)
        try:
            line = holder.stdout.readline()
            assert line.startswith("reserved "), line
        finally:
            holder.kill()
            holder.wait()
        with ccl.Client(c.coordinator, timeout=20) as other:
            with other.ones(4) as t:
                other.all_reduce(t)
                np.testing.assert_array_equal(t.read(1), [WORKERS] * 4)
    finally:
        guard.close()


def test_async_lone_recv_wait_timeout_then_failure(fresh_cluster):
    with ccl.Client(fresh_cluster.coordinator, timeout=30) as c:
        with c.zeros(2) as t:
            work = c.irecv(t, src=0, dst=1, timeout=3)
            # A short wait runs out while the op is still pending; the op
            # itself fails at its own deadline.
            with pytest.raises(ccl.CclError) as e:
                work.wait(timeout=0.2)
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "still running" in e.value.details
            assert work.exception() is None
            with pytest.raises(ccl.CclError) as e:
                work.wait(timeout=20)
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "no matching send" in e.value.details
            assert work.is_completed() and not work.is_success()
            assert work.exception() is e.value


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_coordinator_is_unavailable():
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(ccl.CclError) as e:
        ccl.Client(address, timeout=5)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert f"coordinator {address}" in str(e.value)
    # Bounded by the client's timeout (slack for a busy machine).
    assert time.monotonic() - start < 5 + 30


def test_dead_coordinator_fails_ops_not_reads(fresh_cluster):
    with ccl.Client(fresh_cluster.coordinator, timeout=5) as c:
        t = c.from_numpy(np.arange(3, dtype=np.float32))
        fresh_cluster.kill_coordinator()
        with pytest.raises(ccl.CclError) as e:
            c.all_reduce(t)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
        assert "coordinator" in str(e.value)
        # Workers keep serving their tensors without it.
        np.testing.assert_array_equal(t.read(0), [0, 1, 2])
        with pytest.raises(ccl.CclError) as e:
            c.new_group([0, 1])
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
