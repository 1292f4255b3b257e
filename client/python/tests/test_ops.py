"""Every op and reduce op against numpy references, sync and async, with
tensors written from and read back as numpy arrays."""

import contextlib
import time

import numpy as np
import pytest

import ccl
from ccl import _dtypes
from conftest import WORKERS

RANKS = list(range(WORKERS))


def per_rank_random(shape, dtype, seed=0):
    """Different data on every rank, known to the test."""
    out = {}
    for r in RANKS:
        rng = np.random.default_rng(seed * 100 + r)
        if np.issubdtype(np.dtype(dtype), np.integer):
            out[r] = rng.integers(-5, 6, size=shape).astype(dtype)
        else:
            out[r] = (rng.random(shape) * 2 + 0.5).astype(dtype)
    return out


def reference(op, arrays, scale=1.0):
    stack = np.stack([arrays[r] for r in RANKS]).astype(np.float64)
    if op == ccl.ReduceOp.SUM:
        return stack.sum(0)
    if op == ccl.ReduceOp.PRODUCT:
        return stack.prod(0)
    if op == ccl.ReduceOp.MIN:
        return stack.min(0)
    if op == ccl.ReduceOp.MAX:
        return stack.max(0)
    if op == ccl.ReduceOp.AVG:
        return stack.mean(0)
    if op == ccl.ReduceOp.PREMUL_SUM:
        return (stack * scale).sum(0)
    raise AssertionError(op)


def test_world(client):
    assert client.world_size == WORKERS
    assert client.get_world_size() == WORKERS
    assert sorted(client.members) == RANKS
    assert all(m["state"] == "ready" for m in client.members.values())


@pytest.mark.parametrize("op", list(ccl.ReduceOp))
def test_all_reduce_float32(client, op):
    data = per_rank_random((4, 5), np.float32, seed=int(op))
    scale = 0.25 if op == ccl.ReduceOp.PREMUL_SUM else None
    with client.from_numpy(data) as t:
        work = client.all_reduce(t, op=op, scale=scale)
        assert work.is_completed() and work.is_success()
        expected = reference(op, data, scale or 1.0)
        for r, got in t.read().items():
            assert got.shape == (4, 5) and got.dtype == np.float32
            np.testing.assert_allclose(got, expected, rtol=1e-5,
                                       err_msg=f"rank {r}")
        timings = work.timings
        assert sorted(timings) == RANKS
        assert all(t["total_us"] >= t["device_us"] > 0
                   for t in timings.values())


@pytest.mark.parametrize("op", [ccl.ReduceOp.SUM, ccl.ReduceOp.PRODUCT,
                                ccl.ReduceOp.MIN, ccl.ReduceOp.MAX])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_all_reduce_exact_types(client, op, dtype):
    data = per_rank_random(7, dtype, seed=3)
    with client.from_numpy(data) as t:
        assert t.dtype == np.dtype(dtype).name
        client.all_reduce(t, op=op)
        expected = reference(op, data).astype(dtype)
        for got in t.read().values():
            assert got.dtype == dtype
            np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_all_reduce_float16_is_numpy_float16(client):
    data = {r: np.full(6, r + 0.5, dtype=np.float16) for r in RANKS}
    with client.from_numpy(data) as t:
        client.all_reduce(t, op="sum")
        for got in t.read().values():
            assert got.dtype == np.float16
            np.testing.assert_allclose(got, sum(r + 0.5 for r in RANKS),
                                       rtol=1e-3)


def test_premul_sum_helper(client):
    with client.from_numpy({r: np.ones(3, np.float32) * (r + 1)
                            for r in RANKS}) as t:
        client.all_reduce(t, op=ccl.premul_sum(2.0))
        expected = 2.0 * sum(r + 1 for r in RANKS)
        for got in t.read().values():
            np.testing.assert_allclose(got, expected)


def test_broadcast_from_last_rank(client):
    src = RANKS[-1]
    data = {r: np.arange(5, dtype=np.int64) * (10 if r == src else 0) - r
            for r in RANKS}
    with client.from_numpy(data) as t:
        client.broadcast(t, src=src)
        for got in t.read().values():
            np.testing.assert_array_equal(got, data[src])


@pytest.mark.parametrize("op", [ccl.ReduceOp.SUM, ccl.ReduceOp.MAX,
                                ccl.ReduceOp.AVG])
def test_reduce_onto_dst(client, op):
    dst = 1
    data = per_rank_random(6, np.float32, seed=5)
    with client.from_numpy(data) as t:
        client.reduce(t, dst=dst, op=op)
        np.testing.assert_allclose(t.read(dst), reference(op, data),
                                   rtol=1e-5)


def test_all_gather(client):
    data = {r: np.array([r, r + 0.5, -r], np.float32) for r in RANKS}
    with client.from_numpy(data) as x, \
            client.zeros(3 * WORKERS) as out:
        client.all_gather(out, x)
        expected = np.concatenate([data[r] for r in RANKS])
        for got in out.read().values():
            np.testing.assert_array_equal(got, expected)
        # all_gather_into_tensor is the same call.
        client.all_gather_into_tensor(out, x)


def test_all_gather_in_place_uses_the_ranks_chunk(client):
    # nccl-tests' in-place form: one buffer of world x n, this rank's part
    # at chunk `rank`.
    n = 2
    data = {r: np.zeros(n * WORKERS, np.float32) for r in RANKS}
    for r in RANKS:
        data[r][r * n:(r + 1) * n] = [r + 1, -(r + 1)]
    with client.from_numpy(data) as t:
        client.all_gather(t, t)
        expected = np.concatenate([[r + 1, -(r + 1)] for r in RANKS])
        for got in t.read().values():
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", [ccl.ReduceOp.SUM, ccl.ReduceOp.MIN])
def test_reduce_scatter(client, op):
    n = 3
    data = per_rank_random(n * WORKERS, np.float32, seed=7)
    with client.from_numpy(data) as x, client.zeros(n) as out:
        client.reduce_scatter(out, x, op=op)
        full = reference(op, data)
        for r, got in out.read().items():
            np.testing.assert_allclose(got, full[r * n:(r + 1) * n],
                                       rtol=1e-5)


def test_gather_output_only_on_dst(client):
    dst = 0
    data = {r: np.array([r, r + 1, r + 2], np.int64) for r in RANKS}
    with client.from_numpy(data) as t, \
            client.zeros(3 * WORKERS, "int64", ranks=[dst]) as out:
        client.gather(t, out, dst=dst)
        np.testing.assert_array_equal(
            out.read(dst), np.concatenate([data[r] for r in RANKS]))
        assert out.ranks == (dst,)


def test_scatter_input_only_on_src(client):
    src = 1
    full = np.arange(2 * WORKERS, dtype=np.int64)
    with client.from_numpy(full, ranks=[src]) as chunks, \
            client.zeros(2, "int64") as out:
        client.scatter(out, chunks, src=src)
        for r, got in out.read().items():
            np.testing.assert_array_equal(got, full[2 * r:2 * r + 2])


def test_all_to_all(client):
    n = 2
    data = {r: np.arange(n * WORKERS, dtype=np.float32) + 100 * r
            for r in RANKS}
    with client.from_numpy(data) as x, client.zeros(n * WORKERS) as out:
        client.all_to_all(out, x)
        for i, got in out.read().items():
            expected = np.concatenate(
                [data[j][i * n:(i + 1) * n] for j in RANKS])
            np.testing.assert_array_equal(got, expected)


def test_barrier(client):
    work = client.barrier()
    assert work.is_completed()
    assert client.barrier(async_op=True).wait()


def test_send_recv_same_name(client):
    with client.from_numpy({r: np.full(3, -1.0, np.float32)
                            for r in RANKS}) as t:
        t.write([1.0, 2.0, 3.0], rank=0)
        client.send(t, dst=1, src=0)
        np.testing.assert_array_equal(t.read(1), [1, 2, 3])
        # The other ranks took no part.
        for r in RANKS[2:]:
            np.testing.assert_array_equal(t.read(r), [-1, -1, -1])


def test_send_into_another_tensor(client):
    last = RANKS[-1]
    with client.from_numpy(np.array([7, 8], np.int32), ranks=[last]) \
            as src, client.zeros(2, "int32", ranks=[0]) as dst:
        client.send(src, dst=0, src=last, recv_tensor=dst)
        np.testing.assert_array_equal(dst.read(0), [7, 8])


def test_isend_wait(client):
    with client.zeros(2, ranks=[0, 1]) as t:
        t.write([4.0, 5.0], rank=0)
        req = client.isend(t, dst=1, src=0)
        assert isinstance(req, ccl.Work)
        assert req.wait() is True
        assert req.is_completed() and req.exception() is None
        np.testing.assert_array_equal(t.read(1), [4, 5])


def test_async_ops_complete_in_order(client):
    data = {r: np.full(4, r + 1.0, np.float32) for r in RANKS}
    with client.from_numpy(data) as t:
        works = [client.all_reduce(t, async_op=True) for _ in range(3)]
        seqs = [w.seq for w in works]
        assert seqs == sorted(seqs) and len(set(seqs)) == 3
        deadline = time.monotonic() + 60
        while not works[-1].is_completed():
            assert time.monotonic() < deadline, "async op never completed"
            time.sleep(0.01)
        for w in works:
            w.wait()
        # Each all_reduce multiplied the sum by the world size.
        s = sum(r + 1 for r in RANKS)
        expected = s * WORKERS ** 2
        for got in t.read().values():
            np.testing.assert_allclose(got, expected)


def test_async_timings_after_wait(client):
    with client.ones(1024) as t:
        w = client.all_reduce(t, async_op=True)
        w.wait()
        assert all(v["total_us"] > 0 for v in w.timings.values())


def test_tensor_fills_and_reads(client):
    with client.tensor((2, 3), "float32", "arange+rank") as t:
        for r, got in t.read().items():
            np.testing.assert_array_equal(got, np.arange(6).reshape(2, 3) + r)
    with client.tensor(4, "int32", "affine", value=1, rank_scale=10,
                       step=2) as t:
        for r, got in t.read().items():
            np.testing.assert_array_equal(got, 1 + 10 * r + 2 * np.arange(4))
    with client.full(3, 2.5, "float64") as t:
        np.testing.assert_array_equal(t.read(0), [2.5, 2.5, 2.5])


def test_write_per_rank_and_subset(client):
    with client.zeros(3, "int64") as t:
        t.write(lambda r: [r, r, r])
        t.write({0: [9, 9, 9]})
        got = t.read()
        np.testing.assert_array_equal(got[0], [9, 9, 9])
        for r in RANKS[1:]:
            np.testing.assert_array_equal(got[r], [r, r, r])


def test_large_tensor_round_trip(client):
    # Several 1 MiB chunks each way; the second size is read into memory of
    # its own (ccl._streams.gather), which the caller may write.
    for n in (3 << 18, (5 << 18) + 3):
        big = np.random.default_rng(1).random(n).astype(np.float32)
        with client.from_numpy(big, ranks=[0]) as t:
            got = t.read(0)
            np.testing.assert_array_equal(got, big)
            got[0] = -1
            np.testing.assert_array_equal(t.read(0), big)


def test_with_frees_and_close_frees(cluster):
    with ccl.Client(cluster.coordinator) as c:
        with c.zeros(4, name="py-test-with") as t:
            assert ("py-test-with", "float32", (4,)) in c.list_tensors(0)
        assert t.freed
        assert all(name != "py-test-with" for name, _, _ in c.list_tensors(0))
        kept = c.ones(2)
        name = kept.name
    with ccl.Client(cluster.coordinator) as c:
        assert all(n != name for n, _, _ in c.list_tensors(0))
    with pytest.raises(ccl.CclError) as e:
        c.barrier()
    assert e.value.code_name == "FAILED_PRECONDITION"
    assert "closed" in e.value.details


def test_get_tensor_attaches_to_existing(client):
    with client.from_numpy(np.array([1.5, 2.5], np.float32),
                           name="py-test-attach"):
        t = client.get_tensor("py-test-attach")
        assert t.shape == (2,) and t.dtype == "float32"
        assert t.ranks == tuple(RANKS)
        np.testing.assert_array_equal(t.read(1), [1.5, 2.5])


def test_module_level_api(cluster):
    c = ccl.init_process_group(backend="nccl",
                               init_method=f"tcp://{cluster.coordinator}")
    try:
        assert ccl.is_initialized() and ccl.default_client() is c
        assert ccl.get_world_size() == WORKERS
        t = ccl.from_numpy(lambda rank: [rank + 1.0], dtype=ccl.float32)
        ccl.all_reduce(t, op=ccl.ReduceOp.SUM)
        assert t.read(0)[0] == sum(r + 1 for r in RANKS)
    finally:
        ccl.destroy_process_group()
    assert not ccl.is_initialized()
    assert t.freed


def test_bfloat16_widened_and_raw(client):
    values = np.array([1.0, -2.5, 3.140625, 65280.0], np.float32)
    with client.from_numpy(values, dtype="bfloat16") as t:
        np.testing.assert_array_equal(t.read(0), values)
        raw = t.read(0, raw=True)
        assert raw.dtype == np.uint16
        assert list(raw) == [0x3F80, 0xC020, 0x4049, 0x477F]
        # The worker reads the same values from those bits.
        assert t.summary(0, head=4)["head"] == list(values.astype(float))
        # Both backends reduce bfloat16, rounding each step to nearest even
        # (for these values the same as rounding the exact sum once).
        client.all_reduce(t)
        d = _dtypes.resolve("bfloat16")
        exact = values.astype(np.float64) * WORKERS
        rounded = _dtypes.from_bytes(d, _dtypes.to_bytes(d, exact),
                                     exact.shape, widen=True)
        np.testing.assert_array_equal(t.read(1), rounded)


@pytest.mark.parametrize("dtype", ["bfloat16", "fp8_e4m3", "fp8_e5m2",
                                   "float16"])
def test_client_rounding_matches_worker_fill(client, dtype):
    # The worker's affine fill computes value + rank*rank_scale + i*step in
    # double and rounds it into the dtype; the client rounds the same
    # doubles the same way.
    n, value, rank_scale, step = 200, -3.0, 100.0, 0.37
    with client.tensor(n, dtype, "affine", value=value,
                       rank_scale=rank_scale, step=step) as filled:
        for r in RANKS:
            doubles = value + r * rank_scale + np.arange(n) * step
            with client.from_numpy(doubles.astype(np.float64), dtype=dtype,
                                   ranks=[r]) as mine:
                np.testing.assert_array_equal(
                    mine.read(r, raw=True).view(np.uint8),
                    filled.read(r, raw=True).view(np.uint8),
                    err_msg=f"{dtype} rank {r}")


@contextlib.contextmanager
def lingering(client, seconds=2.0):
    """Unused seqs of `client` stay held `seconds` after its last op instead
    of 20 ms: on a loaded machine more than 20 ms can pass between two lines
    of a test, and a window it looks at would already be given back."""
    windows = client._seqs.windows
    linger = windows._linger
    windows._linger = seconds
    try:
        yield
    finally:
        windows._linger = linger


def test_a_loop_reserves_ahead_and_another_client_does_not_wait_for_it(
        cluster, client):
    # A loop of ops takes its seqs from windows that grow, so it holds
    # seqs it has not used when it stops; another client's op comes after
    # them and must not wait for the workers' gap timeout (30 s): the idle
    # window goes back within its linger (2 s here). The other client's
    # timeout (10 s) is the test's bound.
    with lingering(client), client.ones(4) as t:
        for _ in range(12):
            client.all_reduce(t)
        begin, end = client._seqs.held("world")
        assert begin < end, "the loop should hold reserved seqs"
        with ccl.Client(cluster.coordinator, timeout=10) as other:
            with other.ones(4) as u:
                other.all_reduce(u)
                for got in u.read().values():
                    np.testing.assert_allclose(got, WORKERS)
        # Both clients' seqs were all run or given back: the first client's
        # next op goes through as well.
        client.all_reduce(t)
        expected = WORKERS ** 13
        for got in t.read().values():
            np.testing.assert_allclose(got, expected)


def test_a_failed_op_gives_its_groups_window_back(client):
    # With a 2 s linger, an empty window after the failure is the failure's
    # doing, not the linger's.
    with lingering(client), client.ones(4) as t:
        for _ in range(4):
            client.all_reduce(t)
        begin, end = client._seqs.held("world")
        assert begin < end
        with pytest.raises(ccl.CclError) as e:
            client.all_reduce("no-such-tensor")
        assert e.value.code_name == "NOT_FOUND"
        begin, end = client._seqs.held("world")
        assert begin == end
        client.all_reduce(t)
        for got in t.read().values():
            np.testing.assert_allclose(got, WORKERS ** 5)
