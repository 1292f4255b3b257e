"""The client: torch.distributed's calls, run on a standing cluster.

A Client finds the workers through the coordinator, takes one sequence
number per op from it (so that any number of clients can drive one cluster
without the ranks disagreeing on the order; reserved ahead in windows, so a
loop of ops does not ask the coordinator each time: _seqs.py) and sends the
op to every rank of the group at once. Ranks given to and reported by the
client (src, dst, the keys of per-rank results) are world ranks, as torch's
global ranks, whatever the group.
"""

import itertools
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np

from ccl import _bench, _dtypes
from ccl._channels import Security, resolve_coordinator
from ccl._errors import CclError, combine, from_rpc_error, invalid
from ccl._seqs import ClientSequences
from ccl._streams import gather as _gather, write_chunks as _write_chunks
from ccl.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from ccl.v1 import worker_pb2, worker_pb2_grpc

_log = logging.getLogger("ccl")

_names = itertools.count()


# Group, ReduceOp, premul_sum and RPC_MARGIN_S are re-exported (ccl).
from ccl._handles import (  # noqa: F401
    _FILLS, RPC_MARGIN_S, Group, ReduceOp, Tensor, Work, _group_name, _reduce,
    _seconds, _tensor_name, premul_sum)


class Client:
    """A connection to one cluster. See connect()."""

    def __init__(self, coordinator=None, *, timeout=30.0, group=None,
                 tls_ca=None, tls_cert=None, tls_key=None,
                 tls_server_name=None, token=None, token_file=None):
        self.timeout = _seconds(timeout, 30.0)
        self.coordinator = resolve_coordinator(coordinator)
        self._security = Security(tls_ca, tls_cert, tls_key, tls_server_name,
                                  token, token_file)
        self._lock = threading.Lock()
        self._workers = {}
        self._tensors = {}
        self._pool = None
        self._closed = False
        self._prefix = f"py.{os.getpid()}."
        self._seqs = ClientSequences(self)
        self._coord_channel = self._security.channel(self.coordinator)
        self._coord = coordinator_pb2_grpc.CoordinatorStub(self._coord_channel)
        try:
            self._world = self._get_world()
        except CclError:
            self._coord_channel.close()
            raise
        self._default_group = Group("world", self._world_ranks())
        if group is not None and group != "world":
            self._default_group = self.get_group(group)

    # -- the world ---------------------------------------------------------

    def _get_world(self):
        try:
            return self._coord.GetWorld(coordinator_pb2.GetWorldRequest(),
                                        timeout=self.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, prefix=f"coordinator {self.coordinator}: "
                                 ) from None

    def _merged(self, world):
        """`world`, with the members it lacks taken from the world known so
        far. A coordinator that restarted knows no member until each has
        re-registered (a heartbeat later), while the workers keep serving at
        their addresses: forgetting them would make every call to those
        ranks fail for that moment. A rank whose worker was replaced comes
        back under its new address with the next snapshot that has it."""
        old = getattr(self, "_world", None)
        if old is None or old.world_size != world.world_size:
            return world
        have = {m.rank for m in world.members}
        missing = [m for m in old.members if m.rank not in have]
        if not missing:
            return world
        merged = type(world)()
        merged.CopyFrom(world)
        members = sorted([*merged.members, *missing], key=lambda m: m.rank)
        del merged.members[:]
        merged.members.extend(members)
        return merged

    def _member(self, rank):
        for m in self._world.members:
            if m.rank == rank:
                return m
        if isinstance(rank, (int, np.integer)) and 0 <= rank < \
                self.world_size:
            raise CclError(
                grpc.StatusCode.UNAVAILABLE,
                f"rank {rank} has no worker in the coordinator's world yet "
                f"(generation {self._world.generation}, "
                f"{coordinator_pb2.WorldState.Name(self._world.state)}); "
                f"wait_ready() waits for it", rank=rank)
        raise invalid(f"rank {rank} is out of range; the world has "
                      f"{self.world_size} ranks (0..{self.world_size - 1})")

    def _world_ranks(self):
        # Every rank of the world, whether or not the coordinator knows its
        # worker right now: an op "on the world" sent to fewer ranks would
        # leave its seq missing on the others.
        return list(range(self.world_size))

    @property
    def world_size(self):
        return self._world.world_size

    def get_world_size(self, group=None):
        """torch's get_world_size: the size of `group` (default: the
        client's group, the world unless connect(group=) said otherwise)."""
        return self._group(group).size

    @property
    def generation(self):
        return self._world.generation

    @property
    def members(self):
        """Per world rank: address, host, device ("cpu", "cuda:0"), state."""
        out = {}
        for m in self._world.members:
            kind = "cuda" if m.device.kind == common_pb2.DEVICE_KIND_CUDA \
                else "cpu"
            out[m.rank] = {
                "address": m.address, "host": m.host,
                "device": f"cuda:{m.device.index}" if kind == "cuda" else "cpu",
                "state": coordinator_pb2.MemberState.Name(m.state)
                .removeprefix("MEMBER_STATE_").lower()}
        return out

    def refresh(self):
        """Reads the world again from the coordinator (after a re-form: new
        generation, maybe new worker addresses)."""
        self._world = self._merged(self._get_world())
        if self._default_group.name == "world":
            self._default_group = Group("world", self._world_ranks())
        return self

    def _await_next_generation(self):
        """After the coordinator refused to reserve seqs: if the world is
        re-forming (a rank's communicator broke), waits for the next
        generation within the client's timeout, moves to it, logs one line
        and returns True; False if the refusal had another cause."""
        started = time.monotonic()
        reason = ""
        while True:
            try:
                world = self._get_world()
            except CclError as e:
                # The coordinator itself is away (restarting): no re-form
                # seen, so the refusal stands and says so.
                if not reason:
                    return False
                world, last = None, str(e)
            if world is not None:
                if world.reforming_reason:
                    reason = world.reforming_reason
                elif world.generation != self._world.generation:
                    reason = reason or world.began_after
                    self.refresh()
                    break
                elif not reason:
                    return False
                last = f"world at generation {world.generation}"
            if time.monotonic() - started >= self.timeout:
                raise CclError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"the world is re-forming after {reason or 'a failure'}; "
                    f"no new generation began within {self.timeout} s "
                    f"({last})")
            time.sleep(0.02)
        _log.warning("world re-forming after %s; waited %.1f s (generation %d)",
                     reason or "a failure", time.monotonic() - started,
                     self._world.generation)
        return True

    def wait_ready(self, timeout=60.0, min_generation=0):
        """Until the world is complete at a generation >= `min_generation`
        and every worker is ready in it (after a failure the world re-forms
        by itself), at most `timeout` seconds; then refresh()."""
        seconds = _seconds(timeout, 60.0)
        deadline = time.monotonic() + seconds
        last = "not asked yet"
        while True:
            try:
                world = self._get_world()
                if world.state != coordinator_pb2.WORLD_STATE_COMPLETE:
                    last = (f"world is "
                            f"{coordinator_pb2.WorldState.Name(world.state)}")
                elif world.generation < min_generation:
                    last = (f"world is at generation {world.generation}, "
                            f"waiting for {min_generation}")
                else:
                    self._world = world
                    infos = self._map(self._world_ranks(), self.info,
                                      raise_errors=False)
                    waiting = [
                        str(i) if isinstance(i, CclError) else
                        f"rank {r} is {i.state} in generation {i.generation}"
                        for r, i in infos.items()
                        if isinstance(i, CclError) or i.state != "ready"
                        or i.generation != world.generation]
                    if not waiting:
                        return self.refresh()
                    last = "; ".join(waiting)
            except CclError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise CclError(grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"cluster not ready within {seconds} s: {last}")
            time.sleep(0.05)

    def info(self, rank):
        """The worker's GetInfo reply (rank, generation, device, state,
        groups, tensor counts)."""
        return self._call(rank, "GetInfo", worker_pb2.GetInfoRequest())

    # -- plumbing ----------------------------------------------------------

    def _worker(self, rank):
        if self._closed:
            raise CclError(grpc.StatusCode.FAILED_PRECONDITION,
                           "this client is closed; connect again")
        address = self._member(rank).address
        with self._lock:
            entry = self._workers.get(rank)
            if entry is None or entry[0] != address:
                if entry is not None:
                    entry[1].close()
                channel = self._security.channel(address)
                entry = (address, channel, worker_pb2_grpc.WorkerStub(channel))
                self._workers[rank] = entry
            return entry[2]

    def _check_ranks(self, ranks):
        for r in ranks:
            if not isinstance(r, (int, np.integer)) or not (
                    0 <= r < self.world_size):
                raise invalid(f"rank {r} is out of range; the world has "
                              f"{self.world_size} ranks "
                              f"(0..{self.world_size - 1})")

    def _call(self, rank, method, request, timeout=None):
        try:
            return getattr(self._worker(rank), method)(
                request, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, rank) from None

    def _map(self, ranks, fn, raise_errors=True):
        """fn(rank) for every rank in parallel: {rank: result}; raises the
        combined CclError of the ranks that failed (or, with
        raise_errors=False, puts each CclError in the result)."""
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        max_workers=min(64, max(4, self.world_size)),
                        thread_name_prefix="ccl")
        futures = {r: self._pool.submit(fn, r) for r in ranks}
        results, failures = {}, {}
        for r, f in futures.items():
            try:
                results[r] = f.result()
            except CclError as e:
                failures[r] = e
                results[r] = e
        if failures and raise_errors:
            raise combine(failures)
        return results

    def _unary_all(self, method, requests, timeout):
        """One unary call per rank, concurrently: {rank: reply}; raises the
        combined CclError of the failed ranks. Blocking calls on the pool's
        standing threads: a grpc future starts a polling thread per call
        when its channel is idle, which costs more CPU per op."""

        def call(rank):
            try:
                return getattr(self._worker(rank), method)(requests[rank],
                                                           timeout=timeout)
            except grpc.RpcError as e:
                raise from_rpc_error(e, rank) from None

        return self._map(list(requests), call)

    def _per_rank(self, data, ranks):
        if callable(data):
            return {r: data(r) for r in ranks}
        if isinstance(data, dict):
            missing = [r for r in ranks if r not in data]
            if missing:
                raise invalid(f"no data for rank(s) {missing}")
            return {r: data[r] for r in ranks}
        return {r: data for r in ranks}

    def _read(self, rank, name):
        request = worker_pb2.ReadTensorRequest(name=name)
        try:
            chunks = self._worker(rank).ReadTensor(request,
                                                   timeout=self.timeout)
            return _gather(chunks)
        except grpc.RpcError as e:
            raise from_rpc_error(e, rank) from None

    def _write(self, rank, name, payload):
        try:
            return self._worker(rank).WriteTensor(_write_chunks(name, payload),
                                                  timeout=self.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, rank) from None

    def _free(self, name, ranks):
        requests = {r: worker_pb2.FreeTensorRequest(name=name) for r in ranks}
        self._unary_all("FreeTensor", requests, self.timeout)

    def _forget(self, tensor):
        with self._lock:
            self._tensors.pop(tensor.name, None)

    def _new_name(self, name):
        return name if name else f"{self._prefix}{next(_names)}"

    # -- tensors -----------------------------------------------------------

    def tensor(self, shape, dtype="float32", fill="zeros", *, name=None,
               ranks=None, value=0.0, rank_scale=0.0, step=0.0, seed=0):
        """Allocates a tensor of `shape` on every rank (or `ranks`), on each
        worker's own device, filled on the worker: "zeros", "ones",
        "constant" (value), "rank", "rank+1", "arange", "arange+rank",
        "random" (uniform [0, 1) from seed and rank), "affine" (value +
        rank*rank_scale + i*step) or "empty" (uninitialised). A name is
        made up when not given."""
        if isinstance(shape, (int, np.integer)):
            shape = (int(shape),)
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise invalid(f"shape {list(shape)} has a negative dimension")
        d = _dtypes.resolve(dtype)
        if fill not in _FILLS:
            raise invalid(f"unknown fill '{fill}'; expected one of "
                          f"{', '.join(_FILLS)}")
        ranks = list(self._world_ranks() if ranks is None else ranks)
        self._check_ranks(ranks)
        name = self._new_name(name)
        requests = {
            r: worker_pb2.AllocTensorRequest(
                spec=common_pb2.TensorSpec(name=name, dtype=d.proto,
                                           shape=shape,
                                           device=self._member(r).device),
                fill=worker_pb2.Fill(kind=_FILLS[fill], value=value,
                                     rank_scale=rank_scale, step=step,
                                     seed=seed),
                # A worker still forming this generation fills with the
                # rank it will have there, not the one it had before.
                generation=self._world.generation, rank=r)
            for r in ranks}
        futures = {r: self._worker(r).AllocTensor.future(
            req, timeout=self.timeout) for r, req in requests.items()}
        made, failures = [], {}
        for r, f in futures.items():
            try:
                f.result()
                made.append(r)
            except grpc.RpcError as e:
                failures[r] = from_rpc_error(
                    e, r, prefix=f"allocating '{name}': ")
        if failures:
            # All or nothing: what did get made is freed again.
            if made:
                try:
                    self._free(name, made)
                except CclError:
                    pass
            raise combine(failures)
        t = Tensor(self, name, shape, d, ranks)
        with self._lock:
            self._tensors[name] = t
        return t

    def empty(self, shape, dtype="float32", **kw):
        return self.tensor(shape, dtype, "empty", **kw)

    def zeros(self, shape, dtype="float32", **kw):
        return self.tensor(shape, dtype, "zeros", **kw)

    def ones(self, shape, dtype="float32", **kw):
        return self.tensor(shape, dtype, "ones", **kw)

    def full(self, shape, value, dtype="float32", **kw):
        return self.tensor(shape, dtype, "constant", value=value, **kw)

    def from_numpy(self, data, dtype=None, *, name=None, ranks=None):
        """A tensor holding `data` on every rank (or `ranks`); per rank from
        a callable rank -> data or a dict {rank: data}. Every rank's data
        must have one shape. dtype defaults to the data's numpy dtype (so a
        list of floats becomes float64, as numpy has it)."""
        if isinstance(data, dict) and ranks is None:
            ranks = sorted(data)
        ranks = list(self._world_ranks() if ranks is None else ranks)
        self._check_ranks(ranks)
        arrays = {r: np.asarray(v)
                  for r, v in self._per_rank(data, ranks).items()}
        shapes = {a.shape for a in arrays.values()}
        if len(shapes) != 1:
            raise invalid(f"per-rank data must have one shape; got "
                          f"{ {r: list(a.shape) for r, a in arrays.items()} }")
        first = arrays[ranks[0]]
        if dtype is None:
            if first.dtype == np.bool_:
                first = first.astype(np.uint8)
            dtype = _dtypes.resolve(first.dtype)
        t = self.tensor(first.shape, dtype, "empty", name=name, ranks=ranks)
        try:
            t.write(arrays)
        except Exception:
            t.free()
            raise
        return t

    def get_tensor(self, name, ranks=None):
        """A handle to an existing tensor (made by ccctl, say), from the
        workers' lists; NOT_FOUND if no rank holds it."""
        ranks = list(self._world_ranks() if ranks is None else ranks)
        lists = self._unary_all(
            "ListTensors",
            {r: worker_pb2.ListTensorsRequest() for r in ranks}, self.timeout)
        found = {}
        for r, reply in lists.items():
            for info in reply.tensors:
                if info.spec.name == name:
                    found[r] = info.spec
        if not found:
            raise CclError(grpc.StatusCode.NOT_FOUND,
                           f"no tensor named '{name}' on ranks {ranks}")
        spec = found[min(found)]
        return Tensor(self, name, list(spec.shape),
                      _dtypes.from_proto(spec.dtype), sorted(found))

    def list_tensors(self, rank):
        """[(name, dtype, shape)] of the tensors on `rank`."""
        reply = self._call(rank, "ListTensors", worker_pb2.ListTensorsRequest())
        return [(t.spec.name, _dtypes.from_proto(t.spec.dtype).name,
                 tuple(t.spec.shape)) for t in reply.tensors]

    # -- groups ------------------------------------------------------------

    def _group(self, group):
        if group is None:
            return self._default_group
        if isinstance(group, Group):
            return group
        if group == "world":
            return Group("world", self._world_ranks())
        return self.get_group(group)

    def groups(self):
        """Every group the workers know, world first."""
        infos = self._map(self._world_ranks(), self.info, raise_errors=False)
        seen = {}
        for r in sorted(infos):
            if isinstance(infos[r], CclError):
                continue
            for g in infos[r].groups:
                seen.setdefault(g.name, Group(g.name, g.ranks))
        if not seen:
            errors = [i for i in infos.values() if isinstance(i, CclError)]
            if errors:
                raise errors[0]
        return sorted(seen.values(), key=lambda g: (g.name != "world", g.name))

    def get_group(self, name):
        for g in self.groups():
            if g.name == name:
                return g
        raise CclError(grpc.StatusCode.NOT_FOUND,
                       f"no group named '{name}' in the cluster")

    def new_group(self, ranks=None, name=None, timeout=None):
        """torch's new_group: a subgroup of the world ranks `ranks` (all when
        None), made on every rank of the world at one world seq."""
        ranks = list(self._world_ranks() if ranks is None else ranks)
        self._check_ranks(ranks)
        if len(set(ranks)) != len(ranks):
            raise invalid(f"ranks {ranks} repeat a rank")
        name = name or f"{self._prefix}g{next(_names)}"
        seconds = _seconds(timeout, self.timeout)
        world = Group("world", self._world_ranks())
        seq, generation = self._reserve(world)
        # The generation the seq belongs to: a worker still forming it
        # waits, instead of meeting that seq of the generation before.
        request = worker_pb2.CreateGroupRequest(
            name=name, ranks=ranks, seq=seq, generation=generation)
        self._at_seq(world, "CreateGroup", {r: request for r in world.ranks},
                     seconds + RPC_MARGIN_S)
        return Group(name, ranks)

    def destroy_group(self, group, timeout=None):
        """torch's destroy_process_group(group): drops the subgroup (a Group
        or its name) on every rank of the world, once no op of it is
        outstanding; re-forms do not make it again. Raises the combined
        error of the ranks that did not drop it (NOT_FOUND: no such group
        there)."""
        name = group.name if isinstance(group, Group) else str(group)
        if name == "world":
            raise invalid("the world group cannot be destroyed")
        request = worker_pb2.DestroyGroupRequest(name=name)
        self._unary_all("DestroyGroup",
                        {r: request for r in self._world_ranks()},
                        _seconds(timeout, self.timeout) + RPC_MARGIN_S)

    # -- ops ---------------------------------------------------------------

    def _reserve(self, group):
        """(seq, generation): the next seq of `group` (a Group) for this
        client alone, from its window or the coordinator."""
        if self._closed:
            raise CclError(grpc.StatusCode.FAILED_PRECONDITION,
                           "this client is closed; connect again")
        return self._seqs.take(group)

    def _at_seq(self, group, method, per_rank, timeout):
        """One call per rank at a seq of `group`; a failure drops the
        group's window (SequenceWindows.drop says why)."""
        try:
            return self._unary_all(method, per_rank, timeout)
        except CclError:
            self._seqs.drop(group.name)
            raise

    def _submit(self, kind, group, per_rank, async_op, timeout):
        seconds = _seconds(timeout, self.timeout)
        seq, generation = self._reserve(group)
        for req in per_rank.values():
            req.seq, req.group, req.generation = seq, group.name, generation
            req.timeout_ms = int(seconds * 1000)
            setattr(req, "async", bool(async_op))
        replies = self._at_seq(group, "Submit", per_rank,
                               seconds + RPC_MARGIN_S)
        return Work(self, kind, group.name, seq, replies, async_op)

    def _op(self, kind, name, group, *, input, output=None, root=None,
            op=ReduceOp.SUM, scale=None, async_op=False, timeout=None):
        g = self._group(group)
        reduce_op, premul = _reduce(op, scale)
        if root is not None:
            self._check_ranks([root])
        request = worker_pb2.OpRequest(
            kind=kind, input=_tensor_name(input),
            output=_tensor_name(output) if output is not None else "",
            reduce_op=int(reduce_op), premul_scale=premul,
            root=g.group_rank(root, "root") if root is not None else 0)
        per_rank = {r: _copy(request) for r in g.ranks}
        return self._submit(name, g, per_rank, async_op, timeout)

    def all_reduce(self, tensor, op=ReduceOp.SUM, group=None, async_op=False,
                   *, scale=None, timeout=None):
        """Reduces `tensor` over the group; every rank gets the result."""
        return self._op(worker_pb2.OP_KIND_ALL_REDUCE, "all_reduce", group,
                        input=tensor, op=op, scale=scale, async_op=async_op,
                        timeout=timeout)

    def broadcast(self, tensor, src, group=None, async_op=False, *,
                  timeout=None):
        """Copies world rank `src`'s tensor into every rank's."""
        return self._op(worker_pb2.OP_KIND_BROADCAST, "broadcast", group,
                        input=tensor, root=src, async_op=async_op,
                        timeout=timeout)

    def reduce(self, tensor, dst, op=ReduceOp.SUM, group=None, async_op=False,
               *, scale=None, timeout=None):
        """Reduces onto world rank `dst` (the others' tensors are left as
        the backend leaves them)."""
        return self._op(worker_pb2.OP_KIND_REDUCE, "reduce", group,
                        input=tensor, root=dst, op=op, scale=scale,
                        async_op=async_op, timeout=timeout)

    def all_gather(self, output, input, group=None, async_op=False, *,
                   timeout=None):
        """Every rank's `input` (n elements) into every rank's `output`
        (group size x n, rank r's at chunk r): torch's
        all_gather_into_tensor. A list of tensors is not taken: read
        output.read(r).reshape(size, n) for the chunks."""
        _no_list(output, "all_gather", "output")
        return self._op(worker_pb2.OP_KIND_ALL_GATHER, "all_gather", group,
                        input=input, output=output, async_op=async_op,
                        timeout=timeout)

    all_gather_into_tensor = all_gather

    def reduce_scatter(self, output, input, op=ReduceOp.SUM, group=None,
                       async_op=False, *, scale=None, timeout=None):
        """Reduces `input` (group size x n) over the group; rank r keeps
        chunk r in `output` (n): torch's reduce_scatter_tensor."""
        _no_list(input, "reduce_scatter", "input")
        return self._op(worker_pb2.OP_KIND_REDUCE_SCATTER, "reduce_scatter",
                        group, input=input, output=output, op=op, scale=scale,
                        async_op=async_op, timeout=timeout)

    reduce_scatter_tensor = reduce_scatter

    def gather(self, tensor, gather_list=None, dst=0, group=None,
               async_op=False, *, timeout=None):
        """Every rank's `tensor` (n) into `gather_list` on world rank `dst`:
        one tensor of group size x n that need only exist on dst."""
        _check_rooted_list(gather_list, "gather", "gather_list", "dst")
        return self._op(worker_pb2.OP_KIND_GATHER, "gather", group,
                        input=tensor, output=gather_list, root=dst,
                        async_op=async_op, timeout=timeout)

    def scatter(self, tensor, scatter_list=None, src=0, group=None,
                async_op=False, *, timeout=None):
        """Chunk r of `scatter_list` (one tensor of group size x n, needed
        only on world rank `src`) into rank r's `tensor` (n)."""
        _check_rooted_list(scatter_list, "scatter", "scatter_list", "src")
        return self._op(worker_pb2.OP_KIND_SCATTER, "scatter", group,
                        input=scatter_list, output=tensor, root=src,
                        async_op=async_op, timeout=timeout)

    def all_to_all(self, output, input, group=None, async_op=False, *,
                   timeout=None):
        """Chunk j of rank i's `input` goes to chunk i of rank j's `output`
        (both group size x n): torch's all_to_all_single with even splits."""
        _no_list(output, "all_to_all", "output")
        return self._op(worker_pb2.OP_KIND_ALL_TO_ALL, "all_to_all", group,
                        input=input, output=output, async_op=async_op,
                        timeout=timeout)

    all_to_all_single = all_to_all

    def barrier(self, group=None, async_op=False, *, timeout=None):
        """Returns once every rank of the group reached it."""
        return self._op(worker_pb2.OP_KIND_BARRIER, "barrier", group,
                        input="", async_op=async_op, timeout=timeout)

    def _p2p(self, name, group, ops, async_op, timeout):
        g = self._group(group)
        per_rank = {}
        for rank in g.ranks:
            per_rank[rank] = ops.get(rank) or worker_pb2.OpRequest(
                kind=worker_pb2.OP_KIND_NOP)
        return self._submit(name, g, per_rank, async_op, timeout)

    def send(self, tensor, dst, *, src, recv_tensor=None, recv=True,
             group=None, async_op=False, timeout=None):
        """Sends `tensor` from world rank `src` to `dst`, and posts the
        matching recv on `dst` into `recv_tensor` (default: the tensor of the
        same name there) at the same seq: torch's send on src and recv on
        dst in one call. recv=False posts the send alone (it then fails
        after the timeout, as an unmatched send)."""
        g = self._group(group)
        self._check_ranks([src, dst])
        if src == dst:
            raise invalid("send: src and dst must differ")
        send = worker_pb2.OpRequest(kind=worker_pb2.OP_KIND_SEND,
                                    input=_tensor_name(tensor),
                                    peer=g.group_rank(dst, "dst"))
        g.group_rank(src, "src")
        ops = {src: send}
        if recv:
            ops[dst] = worker_pb2.OpRequest(
                kind=worker_pb2.OP_KIND_RECV,
                input=_tensor_name(recv_tensor if recv_tensor is not None
                                   else tensor),
                peer=g.group_rank(src, "src"))
        return self._p2p("send", g, ops, async_op, timeout)

    def recv(self, tensor, src, *, dst, group=None, async_op=False,
             timeout=None):
        """Posts a recv alone on world rank `dst` from `src`, with no send:
        the tutorial's unmatched recv, which here fails with
        DEADLINE_EXCEEDED after the timeout instead of hanging. (A matched
        transfer is one send() call.)"""
        g = self._group(group)
        self._check_ranks([src, dst])
        if src == dst:
            raise invalid("recv: src and dst must differ")
        g.group_rank(dst, "dst")
        ops = {dst: worker_pb2.OpRequest(kind=worker_pb2.OP_KIND_RECV,
                                         input=_tensor_name(tensor),
                                         peer=g.group_rank(src, "src"))}
        return self._p2p("recv", g, ops, async_op, timeout)

    def isend(self, tensor, dst, *, src, recv_tensor=None, recv=True,
              group=None, timeout=None):
        """send(..., async_op=True): returns a Work at once."""
        return self.send(tensor, dst, src=src, recv_tensor=recv_tensor,
                         recv=recv, group=group, async_op=True,
                         timeout=timeout)

    def irecv(self, tensor, src, *, dst, group=None, timeout=None):
        """recv(..., async_op=True)."""
        return self.recv(tensor, src, dst=dst, group=group, async_op=True,
                         timeout=timeout)

    # -- flight recorder, bench, trace -------------------------------------

    def op_log(self, rank, group="world", limit=0):
        """Rank `rank`'s flight recorder of `group` (an OpLog reply)."""
        return self._call(rank, "GetOpLog", worker_pb2.GetOpLogRequest(
            group=_group_name(group), limit=limit))

    def bench(self, op="all_reduce", minbytes="32M", maxbytes=None,
              stepfactor=None, stepbytes=None, iters=20, warmup=5,
              dtype="float32", reduce_op="sum", root=None, check=False,
              e2e=False, group=None):
        """`ccctl bench`'s sweep; returns the document `ccctl -o json bench`
        prints (op, ranks, type, redop, root, iters, warmup, rows, each row
        size, count, time_us, algbw, busbw, wrong, in_place, e2e_us,
        op_min_us, op_max_us; and avg_busbw)."""
        return _bench.run(self, op, minbytes, maxbytes, stepfactor, stepbytes,
                          iters, warmup, dtype, reduce_op, root, check, e2e,
                          group)

    def trace(self, path=None, groups=None, limit=0):
        """Every rank's flight recorder as a Chrome/Perfetto trace (a dict;
        also written to `path` when given). See docs/python.md."""
        from ccl import _trace
        return _trace.collect(self, path, groups, limit)

    # -- lifetime ----------------------------------------------------------

    def close(self):
        """Frees every tensor this client made and did not free yet, then
        closes its channels."""
        if self._closed:
            return
        with self._lock:
            tensors = list(self._tensors.values())
        for t in tensors:
            try:
                t.free()
            except CclError:
                pass  # a worker that is gone has nothing left to free
        # Unused seqs go back while the channels are open.
        self._seqs.close()
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        with self._lock:
            for _, channel, _ in self._workers.values():
                channel.close()
            self._workers.clear()
        self._coord_channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return (f"Client({self.coordinator!r}, world_size={self.world_size}, "
                f"generation={self.generation})")


def _no_list(value, op, what):
    if isinstance(value, (list, tuple)):
        raise TypeError(
            f"{op}: {what} is one tensor of group size x n elements here, "
            f"not a list (torch's *_into_tensor form)")


def _check_rooted_list(value, op, what, root):
    """gather's gather_list and scatter's scatter_list: torch's signatures
    default them to None (a list needed on the root only), but here the
    argument is required, as one tensor of group size x n elements."""
    if value is None:
        raise invalid(f"{op} needs {what}: one tensor of group size x n "
                      f"elements on {root}")
    _no_list(value, op, what)


def _copy(message):
    out = type(message)()
    out.CopyFrom(message)
    return out
