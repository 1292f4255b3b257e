"""What the client hands out: reduce ops, groups, works (op handles) and
tensors. The Client that makes them is in ccl._client.
"""

import datetime
import enum

import grpc
import numpy as np

from ccl import _dtypes
from ccl._errors import CclError, combine, from_rpc_error, invalid
from ccl.v1 import common_pb2, worker_pb2

# Between an op's own deadline and its RPC's, so that the worker's clear
# error arrives before the RPC gives up (ccctl uses the same margin).
RPC_MARGIN_S = 5.0


class ReduceOp(enum.IntEnum):
    """torch.distributed.ReduceOp's names. PREMUL_SUM multiplies each
    rank's input by `scale` before the sum (give scale= to the op, or use
    premul_sum(scale))."""

    SUM = common_pb2.REDUCE_OP_SUM
    PRODUCT = common_pb2.REDUCE_OP_PROD
    MIN = common_pb2.REDUCE_OP_MIN
    MAX = common_pb2.REDUCE_OP_MAX
    AVG = common_pb2.REDUCE_OP_AVG
    PREMUL_SUM = common_pb2.REDUCE_OP_PREMUL_SUM


class _PremulSum:
    def __init__(self, scale):
        self.scale = float(scale)

    def __repr__(self):
        return f"premul_sum({self.scale})"


def premul_sum(scale):
    """A PREMUL_SUM reduction with its factor, for op=."""
    return _PremulSum(scale)


_REDUCE_NAMES = {"sum": ReduceOp.SUM, "prod": ReduceOp.PRODUCT,
                 "product": ReduceOp.PRODUCT, "min": ReduceOp.MIN,
                 "max": ReduceOp.MAX, "avg": ReduceOp.AVG,
                 "premul_sum": ReduceOp.PREMUL_SUM}


def _reduce(op, scale):
    if isinstance(op, _PremulSum):
        return ReduceOp.PREMUL_SUM, op.scale
    if isinstance(op, str):
        if op.lower() not in _REDUCE_NAMES:
            raise invalid(f"unknown reduce op '{op}'; expected one of "
                          f"{', '.join(_REDUCE_NAMES)}")
        op = _REDUCE_NAMES[op.lower()]
    try:
        op = ReduceOp(op)
    except ValueError:
        raise invalid(f"unknown reduce op {op!r}") from None
    if scale is not None and op != ReduceOp.PREMUL_SUM:
        raise invalid("scale= is for ReduceOp.PREMUL_SUM")
    return op, 1.0 if scale is None else float(scale)


def _seconds(timeout, default):
    if timeout is None:
        return default
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    timeout = float(timeout)
    if timeout <= 0:
        raise invalid(f"timeout must be positive, got {timeout}")
    return timeout


_FILLS = {
    "zeros": worker_pb2.FILL_KIND_ZEROS,
    "ones": worker_pb2.FILL_KIND_ONES,
    "constant": worker_pb2.FILL_KIND_CONSTANT,
    "rank": worker_pb2.FILL_KIND_RANK,
    "rank+1": worker_pb2.FILL_KIND_RANK_PLUS_ONE,
    "arange": worker_pb2.FILL_KIND_ARANGE,
    "arange+rank": worker_pb2.FILL_KIND_ARANGE_PLUS_RANK,
    "random": worker_pb2.FILL_KIND_RANDOM,
    "affine": worker_pb2.FILL_KIND_AFFINE,
    "empty": worker_pb2.FILL_KIND_UNINITIALIZED,
}
_STATE_NAMES = {
    worker_pb2.WORK_STATE_QUEUED: "queued",
    worker_pb2.WORK_STATE_RUNNING: "running",
    worker_pb2.WORK_STATE_COMPLETED: "completed",
    worker_pb2.WORK_STATE_FAILED: "failed",
}


def _timing(t):
    return {"enqueued_unix_us": t.enqueued_unix_us, "queue_us": t.queue_us,
            "device_us": t.device_us, "total_us": t.total_us}


class Group:
    """A group of world ranks (the world, or one made by new_group)."""

    def __init__(self, name, ranks):
        self.name = name
        self.ranks = tuple(int(r) for r in ranks)

    @property
    def size(self):
        return len(self.ranks)

    def group_rank(self, world_rank, what="rank"):
        if world_rank not in self.ranks:
            raise invalid(
                f"{what}: rank {world_rank} is not a member of group "
                f"'{self.name}' (world ranks "
                f"{','.join(map(str, self.ranks))})")
        return self.ranks.index(world_rank)

    def __eq__(self, other):
        return (isinstance(other, Group) and other.name == self.name
                and other.ranks == self.ranks)

    def __hash__(self):
        return hash((self.name, self.ranks))

    def __repr__(self):
        return f"Group({self.name!r}, ranks={list(self.ranks)})"


class Work:
    """An op on every rank of its group: what async_op=True returns (and,
    already complete, what a sync op returns). wait() completes it or
    raises CclError; is_completed() polls without blocking."""

    def __init__(self, client, kind, group, seq, responses, is_async):
        self._client = client
        self.kind = kind
        self.group = group
        self.seq = seq
        self.ranks = tuple(sorted(responses))
        self.work_ids = {r: resp.work_id for r, resp in responses.items()}
        # Who issued each id: a restarted worker counts ids from 1 again, so
        # an id alone could name its successor's work.
        self.worker_ids = {r: getattr(resp, "worker_id", "")
                           for r, resp in responses.items()}
        self._timings = {r: _timing(resp.timing)
                         for r, resp in responses.items()}
        self._done = not is_async
        self._error = None
        # Ranks whose part may still be running. A worker forgets a work
        # once a wait saw it succeed, so those are not asked again.
        self._pending = set() if self._done else set(self.ranks)

    def _settle(self, failures):
        if failures:
            self._done, self._error = True, combine(failures)
        elif not self._pending:
            self._done = True

    def wait(self, timeout=None):
        """Blocks until the op is complete on every rank (at most `timeout`
        seconds, default the client's); raises CclError if it failed."""
        if self._done:
            if self._error:
                raise self._error
            return True
        seconds = _seconds(timeout, self._client.timeout)
        futures = {}
        for rank in sorted(self._pending):
            request = worker_pb2.WaitRequest(work_id=self.work_ids[rank],
                                             timeout_ms=int(seconds * 1000),
                                             worker_id=self.worker_ids[rank])
            futures[rank] = self._client._worker(rank).Wait.future(
                request, timeout=seconds + RPC_MARGIN_S)
        failures, running = {}, {}
        for rank, future in futures.items():
            try:
                status = future.result()
                self._timings[rank] = _timing(status.timing)
                self._pending.discard(rank)
            except grpc.RpcError as e:
                error = from_rpc_error(e, rank)
                # A wait that ran out of time leaves the op running: it may
                # be waited for again. Anything else is the op's failure.
                (running if _still_running(error) else failures)[rank] = error
        if failures:
            self._settle(failures)
            raise self._error
        if running:
            raise combine(running)
        self._settle({})
        return True

    def is_completed(self):
        """True once the op finished (or failed) on every rank."""
        if self._done:
            return True
        futures = {
            rank: self._client._worker(rank).Test.future(
                worker_pb2.TestRequest(work_id=self.work_ids[rank],
                                       worker_id=self.worker_ids[rank]),
                timeout=self._client.timeout)
            for rank in sorted(self._pending)
        }
        failures = {}
        for rank, future in futures.items():
            try:
                status = future.result()
            except grpc.RpcError as e:
                failures[rank] = from_rpc_error(e, rank)
                continue
            self._timings[rank] = _timing(status.timing)
            if status.state == worker_pb2.WORK_STATE_FAILED:
                failures[rank] = CclError(_status_code(status.error_code),
                                          status.error_message, rank=rank)
            elif status.state == worker_pb2.WORK_STATE_COMPLETED:
                self._pending.discard(rank)
        if failures:
            # Done only once no rank can still be running: a failed part
            # ends the op on the others within their own deadline.
            if len(failures) == len(self._pending):
                self._settle(failures)
            return self._done
        self._settle({})
        return self._done

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        """The CclError once it failed, else None."""
        return self._error

    @property
    def timings(self):
        """Per rank: enqueued_unix_us, queue_us, device_us, total_us, as the
        worker measured them (final once the op completed)."""
        return dict(self._timings)

    def __repr__(self):
        state = "pending" if not self._done else (
            "failed" if self._error else "completed")
        return (f"Work({self.kind}, group={self.group!r}, seq={self.seq}, "
                f"{state})")


def _still_running(error):
    return error.code == grpc.StatusCode.DEADLINE_EXCEEDED and (
        "still running" in error.details
        or error.details == "Deadline Exceeded")


def _status_code(number):
    """grpc.StatusCode of a google.rpc.Code number."""
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code
    return grpc.StatusCode.UNKNOWN


class Tensor:
    """A named tensor living on the workers (one per rank in `ranks`, each
    of `shape` and `dtype`). `with` frees it at the end of the block."""

    def __init__(self, client, name, shape, dtype, ranks):
        self._client = client
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self._dtype = _dtypes.resolve(dtype)
        self.ranks = tuple(ranks)
        self.freed = False

    @property
    def dtype(self):
        """The dtype's name ("float32", "bfloat16", ...)."""
        return self._dtype.name

    @property
    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.numel * self._dtype.itemsize

    def _ranks(self, rank):
        if self.freed:
            raise invalid(f"tensor '{self.name}' was freed")
        if rank is None:
            return list(self.ranks)
        ranks = [rank] if isinstance(rank, (int, np.integer)) else list(rank)
        self._client._check_ranks(ranks)
        absent = [r for r in ranks if r not in self.ranks]
        if absent:
            raise invalid(f"tensor '{self.name}' is not on rank(s) {absent} "
                          f"(it is on {list(self.ranks)})")
        return ranks

    def read(self, rank=None, *, raw=False):
        """Rank `rank`'s values as a numpy array of `shape`; without a rank,
        {rank: array} for every rank that holds it. bfloat16 and fp8 come
        widened to float32, or as their bits (uint16/uint8) with raw=True."""
        ranks = self._ranks(rank)
        raw_bytes = self._client._map(
            ranks, lambda r: self._client._read(r, self.name))
        arrays = {}
        for r, data in raw_bytes.items():
            if len(data) != self.nbytes:
                raise CclError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"tensor '{self.name}' on rank {r} holds "
                               f"{len(data)} bytes, not {self.nbytes} "
                               f"({self.dtype} {list(self.shape)}): it was "
                               f"replaced behind this handle", rank=r)
            arrays[r] = _dtypes.from_bytes(self._dtype, data, self.shape,
                                           widen=not raw)
        return arrays[rank] if isinstance(rank, int) else arrays

    numpy = read

    def write(self, data, rank=None):
        """Writes `data` (anything numpy takes, of `shape`): into every rank
        (or `rank`, an int or a list), or per rank from a callable
        rank -> data or a dict {rank: data}."""
        if isinstance(data, dict) and rank is None:
            rank = sorted(data)
        per_rank = self._client._per_rank(data, self._ranks(rank))
        payloads = {}
        for r, value in per_rank.items():
            array = np.asarray(value)
            if array.size != self.numel:
                raise invalid(
                    f"writing {array.size} elements (shape "
                    f"{list(array.shape)}) into tensor '{self.name}' of "
                    f"shape {list(self.shape)} on rank {r}")
            payloads[r] = _dtypes.to_bytes(self._dtype, array)
        self._client._map(
            list(payloads),
            lambda r: self._client._write(r, self.name, payloads[r]))
        return self

    def summary(self, rank, head=8):
        """The worker's summary: sum, min, max, nan_count, checksum (FNV-1a
        of the bytes) and the first `head` values."""
        s = self._client._call(
            rank, "SummarizeTensor",
            worker_pb2.SummarizeTensorRequest(name=self.name, head=head))
        return {"sum": s.sum, "min": s.min, "max": s.max,
                "nan_count": s.nan_count, "checksum": s.checksum,
                "head": list(s.head)}

    def free(self):
        """Frees it on every rank that holds it (once; later calls do
        nothing)."""
        if self.freed:
            return
        self._client._free(self.name, self.ranks)
        self.freed = True
        self._client._forget(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()
        return False

    def __repr__(self):
        where = "freed" if self.freed else f"ranks={list(self.ranks)}"
        return (f"Tensor({self.name!r}, shape={list(self.shape)}, "
                f"dtype={self.dtype}, {where})")


def _tensor_name(t):
    if isinstance(t, Tensor):
        if t.freed:
            raise invalid(f"tensor '{t.name}' was freed")
        return t.name
    if isinstance(t, str):
        return t
    raise TypeError(f"expected a ccl.Tensor or a tensor name, got "
                    f"{type(t).__name__}")


def _group_name(g):
    return g.name if isinstance(g, Group) else (g or "world")
