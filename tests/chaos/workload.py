"""One chaos client: a process that drives the cluster with random ops
through the project's Python client (ccl) and records every request and its
outcome (history.py).

    workload.py --coordinator ADDR --id ID --seed SEED --out DIR
                [--world-size N] [--op-timeout S] [--large-every K]

It runs until SIGTERM, then drains: waits for its async ops, reads every
tensor it holds on every rank one last time (the final check), frees them,
destroys its groups and exits 0. A SIGKILL (the injector's "client killed mid-op") leaves a
history whose last op has no end.

What it issues, at random: every collective (all_reduce with every reduce
op, broadcast, reduce, all_gather, reduce_scatter, gather, scatter,
all_to_all, barrier), send/recv, in place and out of place, on the world and
on subgroups it makes (ranks in any order), sync and async (waited later,
after other ops), on every dtype the CPU backend takes (reductions on the
reducible ones, data movement on bfloat16 and fp8 too), small and large
tensors and empty ones; tensor churn: alloc with fills, write, read,
free; and group churn: at three groups it destroys one, async ops still
running on it or not, and it destroys the rest when it drains. Its tensors and groups are its own (names carry its id), so every
client's history is checked on its own: ops of other clients interleave
with its ops but never touch its tensors.

The client keeps the model (model.py) as it goes, only to choose ops whose
results stay exact (it rewrites a tensor before a reduction could leave the
range its dtype holds exactly). The checker replays the recorded history
with its own model and does not trust this one.
"""

import argparse
import os
import random
import signal
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ccl  # noqa: E402
import history  # noqa: E402
import model  # noqa: E402

SMALL = (1, 2, 3, 4, 5, 7, 8, 16)
LARGE = (4096, 65536)
KINDS = {
    "all_reduce": 14, "broadcast": 6, "reduce": 6, "all_gather": 6,
    "reduce_scatter": 6, "gather": 5, "scatter": 5, "all_to_all": 5,
    "barrier": 3, "send": 6,
    "write": 6, "read": 8, "free": 5, "wait": 4, "new_group": 1,
}
# Between the op deadline and the moment the client stops waiting for a
# still-running async op (RPC margin included).
ASYNC_GRACE_S = 10.0


class Workload:
    def __init__(self, args):
        self.args = args
        self.cid = args.id
        self.rng = random.Random(args.seed)
        self.np_rng = np.random.default_rng(args.seed)
        self.out = history.Writer(os.path.join(args.out,
                                               f"client-{self.cid}.jsonl"))
        self.client = None
        self.n = 0
        self.names = 0
        # name -> {"dtype", "numel", "ranks": [...], "busy": bool}
        self.tensors = {}
        self.cells = {}
        # name -> world ranks in group order (subgroups this client made)
        self.groups = {}
        self.pending = []   # (work, record, written pairs, t_submit)
        self.stopping = False
        self.W = args.world_size

    # -- recording -----------------------------------------------------------

    def begin(self, kind, **fields):
        self.n += 1
        rec = {"c": self.cid, "i": self.n, "ev": "begin", "kind": kind,
               "t0": history.now(), **fields}
        self.out.write(rec)
        return rec

    def end(self, rec, ok, errors=None, **fields):
        doc = {"c": self.cid, "i": rec["i"], "ev": "end", "ok": ok,
               "t1": history.now(), **fields}
        if errors:
            doc["errs"] = errors
        self.out.write(doc)

    @staticmethod
    def errors_of(e):
        """{rank or "c": [code, details]} of a CclError."""
        if e.errors:
            return {str(r): [c.name, d] for r, (c, d) in e.errors.items()}
        key = "c" if e.rank is None else str(e.rank)
        return {key: [e.code.name, e.details]}

    # -- connection ----------------------------------------------------------

    def connect(self):
        deadline = time.monotonic() + 120
        while True:
            try:
                self.client = ccl.Client(self.args.coordinator,
                                         timeout=self.args.rpc_timeout)
                return
            except ccl.CclError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    # -- tensors -------------------------------------------------------------

    def new_name(self, what="t"):
        self.names += 1
        return f"chaos.{self.cid}.{what}{self.names}"

    def idle(self, name):
        t = self.tensors.get(name)
        return t is not None and not t["busy"]

    def forget(self, name):
        t = self.tensors.pop(name, None)
        if t:
            for r in t["ranks"]:
                self.cells.pop((name, r), None)

    def alloc(self, dtype, numel, ranks, fills=None):
        """A new tensor on `ranks` with a fill drawn from `fills`, or None
        when the alloc failed (then it is freed again wherever it may
        exist, and forgotten)."""
        name = self.new_name()
        if fills is None:
            fills = ["zeros", "ones", "constant", "rank", "rank+1", "arange",
                     "arange+rank", "affine"]
            if numel <= 64:
                fills.append("empty")
        fill = self.rng.choice(fills)
        params = {}
        if fill == "constant":
            params = {"value": float(self.rng.randint(-3, 3))}
        elif fill == "affine":
            params = {"value": float(self.rng.randint(-2, 2)),
                      "rank_scale": float(self.rng.randint(0, 2)),
                      "step": float(self.rng.choice([0, 1]))}
        if dtype == "uint8" and fill in ("constant", "affine"):
            params = {k: abs(v) for k, v in params.items()}
        rec = self.begin("alloc", name=name, dtype=dtype, numel=numel,
                         ranks=list(ranks), fill=fill, params=params)
        try:
            self.client.tensor((numel,), dtype, fill, name=name,
                               ranks=list(ranks), **params)
        except ccl.CclError as e:
            self.end(rec, False, self.errors_of(e))
            self.free_quietly(name, ranks, why="alloc_failed")
            self.settle(e)
            return None
        self.end(rec, True)
        self.tensors[name] = {"dtype": dtype, "numel": numel,
                              "ranks": list(ranks), "busy": False}
        for r in ranks:
            vals = model.fill_values(dtype, numel, fill, r, **params)
            if vals is None:
                self.cells[(name, r)] = model.unknown_cell(dtype, numel)
            else:
                self.cells[(name, r)] = model.Cell(
                    vals.copy(), np.ones(numel, bool))
        return name

    def free_quietly(self, name, ranks, why="free"):
        """Frees `name` on `ranks` (recorded); the tensor is forgotten
        whatever the outcome. After a failed alloc or a lost rank (`why`)
        some ranks may not hold it."""
        rec = self.begin("free", name=name, ranks=list(ranks), why=why)
        try:
            self.client._free(name, list(ranks))
            self.end(rec, True)
        except ccl.CclError as e:
            self.end(rec, False, self.errors_of(e))
        self.forget(name)

    def write(self, name, low=None, high=None):
        """Fresh small values on every rank of `name` (a large tensor is
        made anew with a fill instead)."""
        t = self.tensors[name]
        dtype, numel = t["dtype"], t["numel"]
        lo, hi = model.WRITE_RANGE.get(dtype, model.DEFAULT_RANGE)
        if low is not None:
            lo, hi = max(lo, low), min(hi, high)
        values = {r: model.saturate(dtype, self.np_rng.integers(
            lo, hi + 1, size=numel).astype(np.float64)) for r in t["ranks"]}
        rec = self.begin("write", name=name, dtype=dtype,
                         values={str(r): model.encode(v)
                                 for r, v in values.items()})
        handle = ccl.Tensor(self.client, name, (numel,), dtype, t["ranks"])
        errors = {}
        for r in t["ranks"]:
            try:
                handle.write(values[r], rank=r)
                self.cells[(name, r)] = model.Cell(values[r].copy(),
                                                   np.ones(numel, bool))
            except ccl.CclError as e:
                errors.update(self.errors_of(e))
                # A write that failed may have landed in part.
                self.cells[(name, r)].known[:] = False
        self.end(rec, not errors, errors)
        if any(code == "NOT_FOUND" for code, _ in errors.values()):
            self.lost(name)
        return not errors

    def read(self, name, why="read"):
        t = self.tensors[name]
        rec = self.begin("read", name=name, dtype=t["dtype"],
                         numel=t["numel"], ranks=t["ranks"], why=why)
        handle = ccl.Tensor(self.client, name, (t["numel"],), t["dtype"],
                            t["ranks"])
        got, errors = {}, {}
        for r in t["ranks"]:
            try:
                a = handle.read(r)
                raw = np.ascontiguousarray(a).tobytes()
                doc = {"dt": a.dtype.str}
                if len(raw) > 4096:
                    doc["z"] = zlib.compress(raw).hex()
                else:
                    doc.update(model.encode(a))
                got[str(r)] = doc
            except ccl.CclError as e:
                errors.update(self.errors_of(e))
        self.end(rec, not errors, errors, got=got)
        if any(code == "NOT_FOUND" for code, _ in errors.values()):
            self.lost(name)

    def lost(self, name):
        """A rank no longer has the tensor (its worker was replaced): free
        what is left and forget it."""
        if name in self.tensors:
            self.free_quietly(name, self.tensors[name]["ranks"], why="lost")

    def settle(self, error):
        """After a failure that may mean the world is re-forming, waits
        until it is whole again before the next op (--settle; what
        docs/python.md asks of a client today). Without it ops go out at
        once into a re-forming world."""
        if not self.args.settle or error.code.name not in (
                "UNAVAILABLE", "FAILED_PRECONDITION", "ABORTED",
                "DEADLINE_EXCEEDED"):
            return
        rec = self.begin("settle", timeout=60)
        try:
            self.client.wait_ready(60)
            self.end(rec, True, gen=self.client.generation)
        except ccl.CclError as e:
            self.end(rec, False, self.errors_of(e))

    # -- choosing tensors ----------------------------------------------------

    def find(self, dtype, numel, ranks, exclude=(), fills=None):
        """An idle tensor of this dtype and size on every rank of `ranks`,
        else a new one (None when its alloc failed)."""
        candidates = [n for n, t in self.tensors.items()
                      if not t["busy"] and n not in exclude
                      and t["dtype"] == dtype and t["numel"] == numel
                      and set(ranks) <= set(t["ranks"])]
        if candidates and self.rng.random() < 0.8:
            return self.rng.choice(sorted(candidates))
        extra = []
        if self.rng.random() < 0.3:
            extra = [r for r in range(self.W) if r not in ranks]
        return self.alloc(dtype, numel, sorted(set(ranks) | set(extra)),
                          fills)

    def ready_for_reduce(self, name, ranks, k, reduce_op):
        """True when a reduction over k ranks of `name` stays in the range
        its dtype holds exactly, with known values. Otherwise a small tensor
        is rewritten (True when that worked) and a large one freed (False:
        the op is skipped; a later one allocates it anew with a fill)."""
        t = self.tensors[name]
        cells = [self.cells[(name, r)] for r in ranks]
        unknown = any(not c.known.all() or c.inexact for c in cells)
        mag = max(c.magnitude() for c in cells)
        if reduce_op == "prod":
            bad = unknown or mag ** k > model.EXACT[t["dtype"]] / 2
            low, high = -2, 2
        else:
            bad = unknown or mag * k * 2 > model.EXACT[t["dtype"]]
            low, high = None, None
        if not bad:
            return True
        if t["numel"] > 64:
            self.free_quietly(name, t["ranks"])
            return False
        return self.write(name, low, high)

    def ready_for_move(self, name, ranks):
        t = self.tensors[name]
        if all(self.cells[(name, r)].known.all() for r in ranks):
            return True
        if t["numel"] > 64:
            self.free_quietly(name, t["ranks"])
            return False
        return self.write(name)

    # -- groups --------------------------------------------------------------

    def pick_group(self):
        if self.groups and self.rng.random() < 0.4:
            name = self.rng.choice(sorted(self.groups))
            return name, self.groups[name]
        return "world", list(range(self.W))

    def new_group(self):
        size = self.rng.randint(2, self.W)
        ranks = self.rng.sample(range(self.W), size)
        name = self.new_name("g")
        rec = self.begin("new_group", group=name, ranks=ranks,
                         timeout=self.args.op_timeout)
        try:
            self.client.new_group(ranks, name=name,
                                  timeout=self.args.op_timeout)
        except ccl.CclError as e:
            self.end(rec, False, self.errors_of(e))
            return
        self.end(rec, True)
        self.groups[name] = ranks

    def destroy_group(self):
        """Drops one of this client's groups, so that workers do not pile up
        the groups of a long run; busy ones too: async ops already submitted
        on it still run before it goes (the worker drains them), so they must
        succeed when waited, and the checker holds them to that as to any
        op."""
        if not self.groups:
            return
        name = self.rng.choice(sorted(self.groups))
        # Forgotten whatever the outcome: a rank that kept it through a
        # fault makes it again at a re-form, which costs only its memory.
        del self.groups[name]
        rec = self.begin("destroy_group", group=name,
                         timeout=self.args.op_timeout)
        try:
            self.client.destroy_group(name, timeout=self.args.op_timeout)
        except ccl.CclError as e:
            self.end(rec, False, self.errors_of(e))
            return
        self.end(rec, True)

    # -- ops -----------------------------------------------------------------

    def chunk(self):
        u = self.rng.random()
        if u < 0.03:
            return 0
        if u < 0.09:
            return self.rng.choice(LARGE)
        return self.rng.choice(SMALL)

    def collective(self, kind):
        gname, G = self.pick_group()
        k = len(G)
        reducing = kind in ("all_reduce", "reduce", "reduce_scatter")
        n = self.chunk()
        if n > 64:
            # Fills of a large tensor must be exact in its dtype.
            dtype = self.rng.choice(["float32", "int32", "float64", "int64"])
        else:
            dtype = self.rng.choice(model.REDUCIBLE if reducing
                                    else model.DTYPES)
        reduce_op, scale = None, 1.0
        fills = None
        if reducing:
            reduce_op = self.rng.choice(model.REDUCE_OPS)
            if (reduce_op == "premul_sum"
                    and dtype not in model.PREMUL_DTYPES):
                reduce_op = "sum"
            if reduce_op == "premul_sum":
                scale = self.rng.choice([0.5, 2.0])
            if reduce_op == "prod":
                fills = ["zeros", "ones", "rank", "rank+1"]
        root = (self.rng.choice(G) if kind in ("broadcast", "reduce",
                                               "gather", "scatter") else None)
        op = {"kind": kind, "group": gname, "ranks": G, "dtype": dtype,
              "reduce": reduce_op, "scale": scale, "root": root,
              "input": None, "output": None}
        if kind != "barrier":
            in_place = self.rng.random() < 0.4
            full = k * n
            # input numel, output numel, ranks holding input, output
            if kind in ("all_reduce", "broadcast", "reduce"):
                in_n, out_n, in_r, out_r = n, n, G, G
            elif kind == "all_gather":
                in_n, out_n, in_r, out_r = n, full, G, G
            elif kind == "gather":
                in_n, out_n, in_r, out_r = (
                    n, full, G, [root] if self.rng.random() < 0.5 else G)
            elif kind == "reduce_scatter":
                in_n, out_n, in_r, out_r = full, n, G, G
            elif kind == "scatter":
                in_n, out_n, in_r, out_r = (
                    full, n, [root] if self.rng.random() < 0.5 else G, G)
            else:  # all_to_all
                in_n, out_n, in_r, out_r = full, full, G, G
            if in_place:
                inp = self.find(dtype, max(in_n, out_n), G, fills=fills)
                out = inp
            else:
                inp = self.find(dtype, in_n, in_r, fills=fills)
                out = inp and self.find(dtype, out_n, out_r, exclude=(inp,))
            if inp is None or out is None:
                return
            # The ranks whose input the op reads.
            src = [root] if kind == "scatter" else G
            ok = (self.ready_for_reduce(inp, src, k, reduce_op) if reducing
                  else self.ready_for_move(inp, src))
            if not ok or inp not in self.tensors or out not in self.tensors:
                return
            op.update(input=inp, output=None if in_place else out)
        self.submit(op)

    def send(self):
        gname, G = self.pick_group()
        src, dst = self.rng.sample(G, 2)
        n = self.chunk()
        dtype = (self.rng.choice(["float32", "int32"]) if n > 64
                 else self.rng.choice(model.DTYPES))
        if self.rng.random() < 0.5:
            t = self.find(dtype, n, [src, dst])
            recv = None
        else:
            t = self.find(dtype, n, [src])
            recv = t and self.find(dtype, n, [dst], exclude=(t,))
            if recv is None:
                return
        if t is None or not self.ready_for_move(t, [src]):
            return
        if t not in self.tensors or (recv and recv not in self.tensors):
            return
        op = {"kind": "send", "group": gname, "ranks": G, "dtype": dtype,
              "input": t, "output": None, "recv_tensor": recv, "src": src,
              "dst": dst}
        self.submit(op)

    @staticmethod
    def involved(op):
        names = [op.get("input"), op.get("output"), op.get("recv_tensor")]
        return [n for n in dict.fromkeys(names) if n]

    def submit(self, op):
        is_async = self.rng.random() < 0.25 and len(self.pending) < 3
        timeout = self.args.op_timeout
        if any(self.tensors[n]["numel"] > 64 for n in self.involved(op)):
            timeout = self.args.op_timeout * 2
        rec = self.begin("op", op=op, timeout=timeout, is_async=is_async)
        group = ccl.Group(op["group"], op["ranks"])
        kind = op["kind"]
        c = self.client
        red = "sum"
        if op.get("reduce"):
            red = (ccl.premul_sum(op["scale"])
                   if op["reduce"] == "premul_sum" else op["reduce"])
        inp, out = op["input"], op["output"] or op["input"]
        common = {"group": group, "async_op": is_async, "timeout": timeout}
        try:
            if kind in ("all_reduce", "reduce", "broadcast"):
                # The client's _op: its public calls for these are in place
                # only, and out of place is what shows an input keeps its
                # bytes.
                work = c._op(_kind(kind.upper()), kind, group, input=inp,
                             output=op["output"], root=op["root"], op=red,
                             async_op=is_async, timeout=timeout)
            elif kind == "reduce_scatter":
                work = c.reduce_scatter(out, inp, op=red, **common)
            elif kind == "all_gather":
                work = c.all_gather(out, inp, **common)
            elif kind == "gather":
                work = c.gather(inp, out, dst=op["root"], **common)
            elif kind == "scatter":
                work = c.scatter(out, inp, src=op["root"], **common)
            elif kind == "all_to_all":
                work = c.all_to_all(out, inp, **common)
            elif kind == "barrier":
                work = c.barrier(**common)
            elif kind == "send":
                work = c.send(inp, op["dst"], src=op["src"],
                              recv_tensor=op["recv_tensor"], **common)
            else:
                raise AssertionError(kind)
        except ccl.CclError as e:
            self.end(rec, False, self.errors_of(e))
            self.after_failure(op, e)
            self.settle(e)
            return
        if is_async:
            self.out.write({"c": self.cid, "i": rec["i"], "ev": "submitted",
                            "seq": work.seq, "t": history.now()})
            for n in self.involved(op):
                self.tensors[n]["busy"] = True
            self.pending.append((work, rec, op, rec["t0"] + timeout))
            return
        self.end(rec, True, seq=work.seq)
        self.after_success(op)

    def model_cells(self, op):
        names = self.involved(op)
        return {key: cell for key, cell in self.cells.items()
                if key[0] in names}

    def after_success(self, op):
        model.apply(op, self.model_cells(op), True)
        if self.rng.random() < 0.7:
            for n in self.involved(op):
                if n in self.tensors:
                    self.read(n, why="after_op")

    def after_failure(self, op, e):
        if op["kind"] != "barrier":
            model.apply(op, self.model_cells(op), False)
        errors = self.errors_of(e)
        if any(code == "NOT_FOUND" for code, _ in errors.values()):
            details = " ".join(d for _, d in errors.values())
            if "no group named" in details:
                self.groups.pop(op["group"], None)
            for n in self.involved(op):
                if f"'{n}'" in details:
                    self.lost(n)

    def wait_one(self, index=None):
        if not self.pending:
            return
        if index is None:
            index = self.rng.randrange(len(self.pending))
        work, rec, op, deadline = self.pending.pop(index)
        error = None
        while True:
            try:
                work.wait(timeout=max(0.5, deadline - history.now() + 1.0))
                break
            except ccl.CclError as e:
                # A wait that ran out while the op still runs may be
                # repeated; the checker bounds how long that may last.
                still = work.exception() is None
                if still and history.now() < deadline + ASYNC_GRACE_S:
                    continue
                error = e
                break
        for n in self.involved(op):
            if n in self.tensors:
                self.tensors[n]["busy"] = False
        if error is None:
            self.end(rec, True, seq=work.seq)
            self.after_success(op)
        else:
            self.end(rec, False, self.errors_of(error), seq=work.seq,
                     still_running=work.exception() is None)
            self.after_failure(op, error)
            self.settle(error)

    # -- the loop ------------------------------------------------------------

    def step(self):
        kind = self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        idle = sorted(n for n, t in self.tensors.items() if not t["busy"])
        if kind == "wait":
            self.wait_one()
        elif kind == "new_group":
            if len(self.groups) < 3:
                self.new_group()
            else:
                self.destroy_group()
        elif kind == "read":
            if idle:
                self.read(self.rng.choice(idle))
        elif kind == "write":
            small = [n for n in idle if self.tensors[n]["numel"] <= 64]
            if small:
                self.write(self.rng.choice(small))
        elif kind == "free":
            if len(idle) > 6 or (idle and self.rng.random() < 0.3):
                name = self.rng.choice(idle)
                self.free_quietly(name, self.tensors[name]["ranks"])
        elif kind == "send":
            self.send()
        else:
            self.collective(kind)
        # Churn bound: the pool of tensors stays small.
        idle = sorted(n for n, t in self.tensors.items() if not t["busy"])
        while len(idle) > 24:
            name = idle.pop(self.rng.randrange(len(idle)))
            self.free_quietly(name, self.tensors[name]["ranks"])

    def drain(self):
        while self.pending:
            self.wait_one(0)
        self.out.write({"c": self.cid, "ev": "final", "t": history.now()})
        for name in sorted(self.tensors):
            if name in self.tensors:
                self.read(name, why="final")
        for name in sorted(self.tensors):
            if name in self.tensors:
                self.free_quietly(name, self.tensors[name]["ranks"])
        while self.groups:
            self.destroy_group()

    def run(self):
        self.connect()
        self.out.write({"c": self.cid, "ev": "start", "t": history.now(),
                        "seed": self.args.seed, "pid": os.getpid()})
        while not self.stopping:
            self.step()
        self.drain()
        self.out.write({"c": self.cid, "ev": "done", "t": history.now(),
                        "ops": self.n})
        self.out.close()
        self.client.close()


def _kind(name):
    from ccl.v1 import worker_pb2
    return getattr(worker_pb2, f"OP_KIND_{name}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--coordinator", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--op-timeout", type=float, default=3.0)
    p.add_argument("--rpc-timeout", type=float, default=10.0)
    p.add_argument("--settle", action="store_true",
                   help="after a failure, wait for the world to be whole")
    args = p.parse_args()
    w = Workload(args)

    def stop(signum, frame):
        w.stopping = True

    signal.signal(signal.SIGTERM, stop)
    w.run()


if __name__ == "__main__":
    main()
