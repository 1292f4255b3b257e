"""bench(): `ccctl bench`'s sweep with the same figures (nccl-tests' sizes,
columns and bus bandwidth factors), returned as the document that
`ccctl -o json bench` prints. Times come from the workers (the Bench RPC
runs warmup + iters instances back to back at one seq), so the RPC cost
stays out of them; e2e=True adds the time the client sees per sync op."""

import re
import time

import grpc

from ccl import _dtypes
from ccl._handles import RPC_MARGIN_S, _reduce
from ccl._errors import combine, from_rpc_error, invalid
from ccl.v1 import worker_pb2


def _factor_all_reduce(n):
    return 2.0 * (n - 1) / n


def _factor_gather(n):
    return (n - 1) / n


def _factor_one(n):
    return 1.0


# (input, output) elements for `count` elements of the large buffer on n
# ranks: bench_ops.cc's Same, Grow and Shrink.
def _same(count, n):
    return count, count


def _grow(count, n):
    return count // n, count


def _shrink(count, n):
    return count, count // n


# name: (kind, bus factor, buffer elements); one table with
# client/ccctl/bench_ops.cc.
_OPS = {
    "all_reduce": (worker_pb2.OP_KIND_ALL_REDUCE, _factor_all_reduce, _same),
    "all_gather": (worker_pb2.OP_KIND_ALL_GATHER, _factor_gather, _grow),
    "reduce_scatter": (worker_pb2.OP_KIND_REDUCE_SCATTER, _factor_gather,
                       _shrink),
    "broadcast": (worker_pb2.OP_KIND_BROADCAST, _factor_one, _same),
    "reduce": (worker_pb2.OP_KIND_REDUCE, _factor_one, _same),
    "alltoall": (worker_pb2.OP_KIND_ALL_TO_ALL, _factor_gather, _same),
    "gather": (worker_pb2.OP_KIND_GATHER, _factor_gather, _grow),
    "scatter": (worker_pb2.OP_KIND_SCATTER, _factor_gather, _shrink),
    "sendrecv": (worker_pb2.OP_KIND_SEND, _factor_one, _same),
}
_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather",
            "reducescatter": "reduce_scatter", "all_to_all": "alltoall"}
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10,
          "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30,
          "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(value):
    """Bytes from an int or "8", "64K", "1M", "2G" (powers of 2, as
    nccl-tests and ccctl read them)."""
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(value))
    if not match or match.group(2).upper() not in _UNITS:
        raise invalid(f"bad size '{value}'; expected e.g. 8, 64K, 1M, 2G")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def _bench_all(client, group, requests, iters, warmup):
    seq, generation = client._reserve(group)
    deadline = None
    for req in requests.values():
        op = req.op
        op.seq, op.group, op.generation = seq, group.name, generation
        op.timeout_ms = int(client.timeout * 1000)
        deadline = client.timeout * (2 + iters + warmup) + RPC_MARGIN_S
    futures = {r: client._worker(r).Bench.future(req, timeout=deadline)
               for r, req in requests.items()}
    replies, failures = {}, {}
    for r, f in futures.items():
        try:
            replies[r] = f.result()
        except grpc.RpcError as e:
            failures[r] = from_rpc_error(e, r)
    if failures:
        raise combine(failures)
    return replies


def run(client, op_name, minbytes, maxbytes, stepfactor, stepbytes, iters,
        warmup, dtype, reduce_op, root, check, e2e, group):
    name = op_name.replace("-", "_").lower()
    name = _ALIASES.get(name, name)
    if name not in _OPS:
        raise invalid(f"unknown bench op '{op_name}'; expected "
                      f"{', '.join(_OPS)}")
    kind, bus_factor, buffers = _OPS[name]
    lo = parse_size(minbytes)
    hi = parse_size(maxbytes) if maxbytes is not None else lo
    step = parse_size(stepbytes) if stepbytes is not None else 0
    factor = stepfactor if stepfactor else (0 if step > 0 else 2)
    if lo < 1 or hi < lo or (factor and factor <= 1):
        raise invalid("need 1 <= minbytes <= maxbytes and a stepfactor > 1 "
                      "(or stepbytes)")
    if iters < 1 or warmup < 0:
        raise invalid("iters must be >= 1 and warmup >= 0")
    d = _dtypes.resolve(dtype)
    rop, _ = _reduce(reduce_op, None)
    g = client._group(group)
    n = g.size
    members = list(g.ranks)
    if kind == worker_pb2.OP_KIND_SEND and n < 2:
        raise invalid("sendrecv needs 2 ranks")
    root = members[0] if root is None else root
    group_root = g.group_rank(root, "root")
    reduction = kind in (worker_pb2.OP_KIND_ALL_REDUCE,
                         worker_pb2.OP_KIND_REDUCE,
                         worker_pb2.OP_KIND_REDUCE_SCATTER)
    rooted = kind in (worker_pb2.OP_KIND_BROADCAST, worker_pb2.OP_KIND_REDUCE,
                      worker_pb2.OP_KIND_GATHER, worker_pb2.OP_KIND_SCATTER)

    rows = []
    size = lo
    while size <= hi:
        count = size // d.itemsize
        if kind not in (worker_pb2.OP_KIND_ALL_REDUCE,
                        worker_pb2.OP_KIND_BROADCAST,
                        worker_pb2.OP_KIND_REDUCE, worker_pb2.OP_KIND_SEND):
            count = count // n * n
        if count > 0:
            rows.append(_row(client, g, members, kind, name, bus_factor,
                             buffers, count, d, rop, root, group_root,
                             iters, warmup, check, e2e))
        if not factor and not step:
            break
        size = int(size * factor) if factor else size + step

    busbw = [r["busbw"] for r in rows] + [r["in_place"]["busbw"] for r in rows]
    return {
        "op": name, "ranks": n, "type": d.name,
        "redop": rop.name.lower().replace("product", "prod")
        if reduction else "none",
        "root": root if rooted else -1, "iters": iters, "warmup": warmup,
        "rows": rows,
        "avg_busbw": sum(busbw) / len(busbw) if busbw else 0.0,
    }


def _row(client, g, members, kind, name, bus_factor, buffers, count, d, rop,
         root, group_root, iters, warmup, check, e2e):
    n = g.size
    in_count, out_count = buffers(count, n)
    src = client.tensor(in_count, d, "zeros", ranks=members)
    dst = None
    try:
        dst = client.tensor(out_count, d, "zeros", ranks=members)
        row = {"size": count * d.itemsize, "count": count}
        for in_place in (False, True):
            requests = {}
            for r in members:
                op = worker_pb2.OpRequest(kind=kind, reduce_op=int(rop),
                                          premul_scale=1.0, root=group_root)
                if kind == worker_pb2.OP_KIND_SEND:
                    first, second = members[0], members[1]
                    op.kind = (worker_pb2.OP_KIND_SEND if r == first else
                               worker_pb2.OP_KIND_RECV if r == second else
                               worker_pb2.OP_KIND_NOP)
                    op.peer = g.group_rank(second if r == first else first)
                    op.input = src.name if r == first else dst.name
                elif in_place:
                    op.input = dst.name if out_count > in_count else src.name
                else:
                    op.input, op.output = src.name, dst.name
                requests[r] = worker_pb2.BenchRequest(
                    op=op, iters=iters, warmup_iters=warmup,
                    check=bool(check))
            replies = _bench_all(client, g, requests, iters, warmup)
            slowest = max(rep.avg_us for rep in replies.values())
            wrong = sum(rep.wrong for rep in replies.values())
            algbw = row["size"] / slowest / 1e3 if slowest > 0 else 0.0
            figures = {"time_us": slowest, "algbw": algbw,
                       "busbw": algbw * bus_factor(n), "wrong": wrong}
            if in_place:
                row["in_place"] = figures
            else:
                row.update(figures)
                row["op_min_us"] = min(rep.min_us for rep in replies.values())
                row["op_max_us"] = max(rep.max_us for rep in replies.values())
        row["e2e_us"] = 0.0
        if e2e and kind != worker_pb2.OP_KIND_SEND:
            start = time.perf_counter()
            for _ in range(iters):
                client._op(kind, name, g, input=src, output=dst,
                           root=root if kind in (
                               worker_pb2.OP_KIND_BROADCAST,
                               worker_pb2.OP_KIND_REDUCE,
                               worker_pb2.OP_KIND_GATHER,
                               worker_pb2.OP_KIND_SCATTER) else None,
                           op=rop)
            row["e2e_us"] = (time.perf_counter() - start) / iters * 1e6
        order = ["size", "count", "time_us", "algbw", "busbw", "wrong",
                 "in_place", "e2e_us", "op_min_us", "op_max_us"]
        return {k: row[k] for k in order}
    finally:
        src.free()
        if dst is not None:
            dst.free()
