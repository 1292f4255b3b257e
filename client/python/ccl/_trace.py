"""Every rank's flight recorder as a Chrome / Perfetto trace (JSON object
format), the same document `ccctl debug trace` writes.

Layout: one process per rank ("rank R"), one thread track per group in it;
one complete ("X") slice per op from the moment it started running (its
enqueue time plus its queue time) to its completion; a failed op's slice is
named "<op> FAILED" and an instant event marks the failure; flow arrows
link the ranks of one (generation, group, seq): a send to its recv, and for
a collective the rank that started it last to every other rank, since
those were the ones waiting for it.

Time: every worker stamps ops with its own wall clock. The client reads
each worker's clock (GetOpLog's now_unix_us) a few times, keeps the reading
with the shortest round trip, and takes the worker's offset as that reading
minus the midpoint of the round trip (Cristian's method; the error is at
most half the round trip). Ranks on one host share the host's best
reading. An offset no larger than its error is not applied: those clocks
agree as far as can be measured, which is the common case on one machine.
Timestamps are microseconds on the client's clock since time_base_unix_us.
"""

import json
import time

import grpc

from ccl._errors import CclError
from ccl.v1 import common_pb2, worker_pb2

CLOCK_PROBES = 5

_KIND_NAMES = {
    worker_pb2.OP_KIND_ALL_REDUCE: "all_reduce",
    worker_pb2.OP_KIND_BROADCAST: "broadcast",
    worker_pb2.OP_KIND_REDUCE: "reduce",
    worker_pb2.OP_KIND_ALL_GATHER: "all_gather",
    worker_pb2.OP_KIND_REDUCE_SCATTER: "reduce_scatter",
    worker_pb2.OP_KIND_GATHER: "gather",
    worker_pb2.OP_KIND_SCATTER: "scatter",
    worker_pb2.OP_KIND_ALL_TO_ALL: "all_to_all",
    worker_pb2.OP_KIND_BARRIER: "barrier",
    worker_pb2.OP_KIND_SEND: "send",
    worker_pb2.OP_KIND_RECV: "recv",
    worker_pb2.OP_KIND_NOP: "nop",
}
_ROOTED = {worker_pb2.OP_KIND_BROADCAST, worker_pb2.OP_KIND_REDUCE,
           worker_pb2.OP_KIND_GATHER, worker_pb2.OP_KIND_SCATTER}
_P2P = {worker_pb2.OP_KIND_SEND, worker_pb2.OP_KIND_RECV}
_REDUCTIONS = {worker_pb2.OP_KIND_ALL_REDUCE, worker_pb2.OP_KIND_REDUCE,
               worker_pb2.OP_KIND_REDUCE_SCATTER}
_DTYPE_SIZES = {
    common_pb2.DTYPE_FLOAT32: 4, common_pb2.DTYPE_FLOAT64: 8,
    common_pb2.DTYPE_FLOAT16: 2, common_pb2.DTYPE_BFLOAT16: 2,
    common_pb2.DTYPE_INT8: 1, common_pb2.DTYPE_UINT8: 1,
    common_pb2.DTYPE_INT32: 4, common_pb2.DTYPE_INT64: 8,
    common_pb2.DTYPE_FP8_E4M3: 1, common_pb2.DTYPE_FP8_E5M2: 1,
}


def _now_us():
    return time.time_ns() / 1000.0


def _code_name(number):
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code.name
    return f"CODE_{number}"


def probe_clocks(client, ranks, probes=CLOCK_PROBES):
    """{rank: (offset_us, rtt_us)}: each worker's clock minus the client's,
    from its reading with the shortest round trip."""
    out = {}
    for rank in ranks:
        best = None
        for _ in range(probes):
            t0 = _now_us()
            log = client.op_log(rank, "world", 1)
            t1 = _now_us()
            sample = (t1 - t0, log.now_unix_us - (t0 + t1) / 2)
            if best is None or sample[0] < best[0]:
                best = sample
        out[rank] = (best[1], best[0])
    return out


def align_clocks(samples, hosts):
    """{rank: {"host", "offset_us", "uncertainty_us", "applied"}}: ranks on
    one host share its shortest-round-trip reading; an offset within its
    uncertainty is not applied."""
    best = {}
    for rank, (offset, rtt) in samples.items():
        host = hosts.get(rank) or f"rank{rank}"
        if host not in best or rtt < best[host][1]:
            best[host] = (offset, rtt)
    clocks = {}
    for rank in samples:
        host = hosts.get(rank) or f"rank{rank}"
        offset, rtt = best[host]
        applied = abs(offset) > rtt / 2
        clocks[rank] = {"host": hosts.get(rank, ""),
                        "offset_us": round(offset, 1),
                        "uncertainty_us": round(rtt / 2, 1),
                        "applied": applied}
    return clocks


def build(logs, groups, clocks, members, generator, coordinator=""):
    """The trace document from flight recorders.

    logs: [(world rank, group name, OpLog)]; groups: {name: [world ranks in
    group-rank order]}; clocks: align_clocks' result; members: {rank:
    description}."""
    group_names = sorted(groups, key=lambda g: (g != "world", g))
    tids = {g: i + 1 for i, g in enumerate(group_names)}
    slices = []
    for rank, group, log in logs:
        clock = clocks.get(rank, {})
        offset = clock.get("offset_us", 0.0) if clock.get("applied") else 0.0
        now = log.now_unix_us - offset
        ranks = groups.get(group, [])
        for rec in log.records:
            if rec.kind == worker_pb2.OP_KIND_NOP:
                continue  # takes a seq on a rank with no part in a p2p op
            if rec.timing.enqueued_unix_us <= 0:
                continue  # refused before it was queued: no time to show
            enqueued = rec.timing.enqueued_unix_us - offset
            start = enqueued + rec.timing.queue_us
            done = rec.state in (worker_pb2.WORK_STATE_COMPLETED,
                                 worker_pb2.WORK_STATE_FAILED)
            end = enqueued + rec.timing.total_us if done else now
            slices.append({"rank": rank, "group": group, "rec": rec,
                           "start": start, "end": max(end, start),
                           "ranks": ranks})
    base = min((s["start"] for s in slices), default=_now_us())

    events = []
    for rank in sorted(members):
        events.append({"ph": "M", "name": "process_name", "pid": rank,
                       "args": {"name": f"rank {rank} ({members[rank]})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank,
                       "args": {"sort_index": rank}})
        for g in group_names:
            if rank in groups[g]:
                events.append({"ph": "M", "name": "thread_name", "pid": rank,
                               "tid": tids[g],
                               "args": {"name": f"group {g}"}})
                events.append({"ph": "M", "name": "thread_sort_index",
                               "pid": rank, "tid": tids[g],
                               "args": {"sort_index": tids[g]}})

    slices.sort(key=lambda s: (s["start"], s["rank"]))
    for s in slices:
        rec = s["rec"]
        kind = _KIND_NAMES.get(rec.kind, f"op{rec.kind}")
        failed = rec.state == worker_pb2.WORK_STATE_FAILED
        running = rec.state in (worker_pb2.WORK_STATE_QUEUED,
                                worker_pb2.WORK_STATE_RUNNING)
        name = kind + (" FAILED" if failed else " (running)" if running
                       else "")
        args = {
            "group": s["group"], "seq": rec.seq,
            "generation": rec.generation,
            "state": _state_name(rec.state),
            "dtype": common_pb2.DType.Name(rec.dtype).removeprefix(
                "DTYPE_").lower(),
            "count": rec.count,
            "bytes": rec.count * _DTYPE_SIZES.get(rec.dtype, 0),
            "queue_us": round(rec.timing.queue_us, 3),
            "device_us": round(rec.timing.device_us, 3),
            "total_us": round(rec.timing.total_us, 3),
            "enqueued_unix_us": rec.timing.enqueued_unix_us,
            "work_id": rec.work_id,
        }
        if rec.input:
            args["input"] = rec.input
        if rec.output:
            args["output"] = rec.output
        if rec.kind in _ROOTED:
            args["root"] = _world(s["ranks"], rec.root)
        if rec.kind in _P2P:
            args["peer"] = _world(s["ranks"], rec.peer)
        if rec.kind in _REDUCTIONS:
            args["reduce_op"] = common_pb2.ReduceOp.Name(
                rec.reduce_op).removeprefix("REDUCE_OP_").lower()
        if rec.error_code:
            args["error"] = (f"{_code_name(rec.error_code)}: "
                             f"{rec.error_message}")
        s["ts"] = round(s["start"] - base, 3)
        s["dur"] = round(s["end"] - s["start"], 3)
        s["args"] = args
        event = {"ph": "X", "cat": "op", "name": name, "pid": s["rank"],
                 "tid": tids[s["group"]], "ts": s["ts"], "dur": s["dur"],
                 "args": args}
        if failed:
            event["cname"] = "terrible"
        events.append(event)
        if failed:
            events.append({
                "ph": "i", "s": "t", "cat": "error",
                "name": f"{kind} failed: {_code_name(rec.error_code)}",
                "pid": s["rank"], "tid": tids[s["group"]],
                "ts": round(s["ts"] + s["dur"], 3),
                "args": {"error": args.get("error", "")}})

    events.extend(_flows(slices, tids))
    other = {
        "generator": generator,
        "coordinator": coordinator,
        "time_base_unix_us": round(base, 1),
        "clock": ("microseconds on the client's wall clock since "
                  "time_base_unix_us; worker clocks aligned by their "
                  "shortest-round-trip reading (see docs/python.md)"),
        "clocks": {str(r): c for r, c in sorted(clocks.items())},
    }
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": other}


def _world(ranks, group_rank):
    if 0 <= group_rank < len(ranks):
        return ranks[group_rank]
    return group_rank


def _state_name(state):
    return worker_pb2.WorkState.Name(state).removeprefix(
        "WORK_STATE_").lower()


def _flows(slices, tids):
    by_op = {}
    for s in slices:
        rec = s["rec"]
        by_op.setdefault((rec.generation, s["group"], rec.seq), []).append(s)
    flows = []
    next_id = 1

    def arrow(src, dst, key):
        nonlocal next_id
        name = f"{key[1]} seq {key[2]}"
        # From early in the source (when it arrived, or the data left) to
        # late in the destination (when it was let go): forward in time.
        for ph, s, at in (("s", src, 0.05), ("f", dst, 0.95)):
            event = {"ph": ph, "cat": "flow", "name": name, "id": next_id,
                     "pid": s["rank"], "tid": tids[s["group"]],
                     "ts": round(s["ts"] + s["dur"] * at, 3)}
            if ph == "f":
                event["bp"] = "e"
            flows.append(event)
        next_id += 1

    for key in sorted(by_op):
        group = sorted(by_op[key], key=lambda s: s["rank"])
        if len(group) < 2:
            continue
        sends = [s for s in group if s["rec"].kind == worker_pb2.OP_KIND_SEND]
        recvs = [s for s in group if s["rec"].kind == worker_pb2.OP_KIND_RECV]
        if sends or recvs:
            for send in sends:
                for recv in recvs:
                    if recv["rank"] == send["args"].get("peer"):
                        arrow(send, recv, key)
            continue
        last = max(group, key=lambda s: (s["start"], -s["rank"]))
        for s in group:
            s["args"]["last_arrival"] = last["rank"]
            if s is not last:
                arrow(last, s, key)
    return flows


def collect(client, path=None, groups=None, limit=0,
            generator="ccl.trace (python)"):
    """Fetches every rank's flight recorder of `groups` (default: every
    group the workers know) and builds the trace; writes it to `path` when
    given. Ranks that do not answer are left out and named in
    otherData["errors"]."""
    known = {g.name: list(g.ranks) for g in client.groups()}
    if groups is None:
        wanted = list(known)
    else:
        wanted = [g.name if hasattr(g, "name") else g for g in groups]
        missing = [g for g in wanted if g not in known]
        if missing:
            raise CclError(grpc.StatusCode.NOT_FOUND,
                           f"no group named {', '.join(missing)} in the "
                           f"cluster (known: {', '.join(known)})")
    selected = {g: known[g] for g in wanted}
    errors = []
    ranks = sorted(client.members)
    reachable = []
    samples = {}
    for rank in ranks:
        try:
            samples.update(probe_clocks(client, [rank]))
            reachable.append(rank)
        except CclError as e:
            errors.append(str(e))
    logs = []
    for g, members in selected.items():
        for rank in members:
            if rank not in reachable:
                continue
            try:
                logs.append((rank, g, client.op_log(rank, g, limit)))
            except CclError as e:
                errors.append(str(e))
    info = client.members
    hosts = {r: info[r]["host"] for r in ranks}
    described = {r: f"{info[r]['device']} @ {info[r]['host'] or '?'}"
                 for r in ranks}
    document = build(logs, selected, align_clocks(samples, hosts), described,
                     generator, client.coordinator)
    if errors:
        document["otherData"]["errors"] = errors
    if path:
        with open(path, "w") as f:
            json.dump(document, f, indent=1)
            f.write("\n")
    return document
