"""The model the chaos history is checked against: what every tensor holds on
every rank after each op, for the CPU (Gloo) workers' semantics.

A tensor's content on one rank is a Cell: its values (numpy, in the dtype's
numpy form; bfloat16 and fp8 widened to float32, as the client reads them)
and a mask of the elements the model knows. An op that succeeded writes the
values torch.distributed defines; an op that failed makes exactly the
elements it could have written unknown, and nothing else: an out-of-place
op's input, the chunks of an in-place scatter that are not this rank's, a
reduce's output off the root, all keep their bytes even when the op fails.
That is the "tensors not involved kept their bytes" part of the check, at
element granularity.

Values are kept small integers (the workload rewrites a tensor before its
magnitude could leave the range where its dtype is exact), so sums and
products are exact in any order and the comparison is exact except after
avg (a division), where floats get a tolerance of their precision.

The same functions serve the workload (to know magnitudes and shapes) and
the checker (to replay the recorded history); the checker trusts only the
recorded requests and outcomes, never the workload's own model.
"""

import base64

import numpy as np

REDUCIBLE = ("float32", "float64", "float16", "int8", "uint8", "int32",
             "int64")
MOVE_ONLY = ("bfloat16", "fp8_e4m3", "fp8_e5m2")
DTYPES = REDUCIBLE + MOVE_ONLY
REDUCE_OPS = ("sum", "prod", "min", "max", "avg", "premul_sum")
# premul_sum scales in floating point: the workers refuse it on other types.
PREMUL_DTYPES = ("float16", "bfloat16", "float32", "float64", "fp8_e4m3",
                 "fp8_e5m2")

# numpy form of each dtype as the client reads it (widened for bf16/fp8).
NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
      "int8": np.int8, "uint8": np.uint8, "int32": np.int32,
      "int64": np.int64, "bfloat16": np.float32, "fp8_e4m3": np.float32,
      "fp8_e5m2": np.float32}
# The largest magnitude up to which every integer is exact in the dtype (and
# integers do not wrap): results of reductions are kept below it.
EXACT = {"float32": 1 << 24, "float64": 1 << 53, "float16": 2048,
         "int8": 127, "uint8": 255, "int32": (1 << 31) - 1,
         "int64": 1 << 62, "bfloat16": 256, "fp8_e4m3": 16, "fp8_e5m2": 8}
# What a fresh write draws from: small integers every dtype holds exactly.
WRITE_RANGE = {"uint8": (0, 6)}
DEFAULT_RANGE = (-6, 6)


def is_int(dtype):
    return np.issubdtype(np.dtype(NP[dtype]), np.integer)


def tolerance(dtype):
    """Relative tolerance for values that went through a division (avg)."""
    return {"float16": 2e-3, "float32": 1e-6, "float64": 1e-12}.get(dtype, 0)


class Cell:
    """One rank's copy of a tensor."""

    __slots__ = ("values", "known", "inexact")

    def __init__(self, values, known, inexact=False):
        self.values = values
        self.known = known
        # Some element went through avg: compare with the dtype's tolerance.
        self.inexact = inexact

    def copy(self):
        return Cell(self.values.copy(), self.known.copy(), self.inexact)

    def magnitude(self):
        if not self.known.any():
            return 0
        return float(np.abs(self.values[self.known].astype(np.float64)).max())


def unknown_cell(dtype, numel):
    return Cell(np.zeros(numel, NP[dtype]), np.zeros(numel, bool))


def cast(dtype, values):
    """float64/int64 results into the dtype as the worker stores them:
    integers wrap as C++'s conversions after integer arithmetic do."""
    a = np.asarray(values)
    if is_int(dtype):
        return a.astype(np.int64).astype(NP[dtype])
    return a.astype(np.float64).astype(NP[dtype])


def saturate(dtype, values):
    """float64 into the dtype as the worker's fills and premul do: integers
    truncate toward zero and saturate; bfloat16 and fp8 round to nearest
    even (through the client's own conversion, which follows the workers')
    and are kept widened."""
    a = np.asarray(values, np.float64)
    if is_int(dtype):
        info = np.iinfo(NP[dtype])
        a = np.trunc(np.nan_to_num(a))
        return np.clip(a, info.min, info.max).astype(NP[dtype])
    if dtype in MOVE_ONLY:
        from ccl import _dtypes
        d = _dtypes.resolve(dtype)
        return _dtypes.from_bytes(d, _dtypes.to_bytes(d, a), a.shape,
                                  widen=True).astype(np.float32)
    return a.astype(NP[dtype])


def fill_values(dtype, numel, fill, rank, value=0.0, rank_scale=0.0,
                step=0.0):
    """The values AllocTensor's fill gives (None for "empty": unknown)."""
    i = np.arange(numel, dtype=np.float64)
    if fill == "zeros":
        v = np.zeros(numel)
    elif fill == "ones":
        v = np.ones(numel)
    elif fill == "constant":
        v = np.full(numel, float(value))
    elif fill == "rank":
        v = np.full(numel, float(rank))
    elif fill == "rank+1":
        v = np.full(numel, float(rank + 1))
    elif fill == "arange":
        v = i
    elif fill == "arange+rank":
        v = i + rank
    elif fill == "affine":
        v = value + rank * rank_scale + i * step
    elif fill == "empty":
        return None
    else:
        raise ValueError(f"no model for fill {fill!r}")
    return saturate(dtype, v)


# -- encoding values into the history ---------------------------------------

def encode(array):
    a = np.ascontiguousarray(array)
    return {"dt": a.dtype.str, "b": base64.b64encode(a.tobytes()).decode()}


def decode(doc):
    return np.frombuffer(base64.b64decode(doc["b"]), np.dtype(doc["dt"]))


# -- reductions ----------------------------------------------------------------

def reduce_values(dtype, op, arrays, scale=1.0):
    """The reduction of per-rank arrays as the Gloo backend computes it, and
    whether the result is inexact (a division happened)."""
    k = len(arrays)
    if is_int(dtype):
        stack = np.stack([a.astype(np.int64) for a in arrays])
        if op == "sum":
            return cast(dtype, stack.sum(0)), False
        if op == "prod":
            return cast(dtype, stack.prod(0)), False
        if op == "min":
            return cast(dtype, stack.min(0)), False
        if op == "max":
            return cast(dtype, stack.max(0)), False
        if op == "avg":
            # C++ integer division truncates toward zero.
            s = cast(dtype, stack.sum(0)).astype(np.int64)
            q = np.abs(s) // k * np.sign(s)
            return cast(dtype, q), False
        if op == "premul_sum":
            scaled = np.stack([saturate(dtype, a.astype(np.float64) * scale)
                               .astype(np.int64) for a in arrays])
            return cast(dtype, scaled.sum(0)), False
    stack = np.stack([a.astype(np.float64) for a in arrays])
    if op == "sum":
        return cast(dtype, stack.sum(0)), False
    if op == "prod":
        return cast(dtype, stack.prod(0)), False
    if op == "min":
        return cast(dtype, stack.min(0)), False
    if op == "max":
        return cast(dtype, stack.max(0)), False
    if op == "avg":
        s = cast(dtype, stack.sum(0)).astype(np.float64)
        return cast(dtype, s / k), True
    if op == "premul_sum":
        scaled = np.stack([cast(dtype, a.astype(np.float64) * scale)
                           .astype(np.float64) for a in arrays])
        return cast(dtype, scaled.sum(0)), False
    raise ValueError(op)


# -- ops ---------------------------------------------------------------------

def effects(op, cells):
    """What `op` writes: a list of (rank, tensor, slice, source) where
    source(cells) gives (values, known, inexact) for that slice on success.

    `op` is the recorded request: kind, group ranks (world ranks, in group
    order), tensor names (input, output; output None = in place), root or
    src/dst (world ranks), reduce op and scale. `cells[(name, rank)]` is
    the state before the op. On failure the same slices become unknown.
    """
    kind = op["kind"]
    G = op["ranks"]
    k = len(G)
    inp = op.get("input")
    out = op.get("output") or inp
    in_place = out == inp
    eff = []

    def whole(name, rank):
        return slice(0, cells[(name, rank)].values.size)

    def reduced(sl=slice(None)):
        def src(c):
            arrays = [c[(inp, g)].values[sl] for g in G]
            known = np.logical_and.reduce([c[(inp, g)].known[sl] for g in G])
            vals, inexact = reduce_values(op["dtype"], op["reduce"], arrays,
                                          op.get("scale", 1.0))
            inexact = inexact or any(c[(inp, g)].inexact for g in G)
            return vals, known, inexact
        return src

    def copy_from(name, rank, sl):
        def src(c):
            cell = c[(name, rank)]
            return cell.values[sl].copy(), cell.known[sl].copy(), cell.inexact
        return src

    if kind == "all_reduce":
        for g in G:
            eff.append((g, out, whole(out, g), reduced()))
    elif kind == "broadcast":
        root = op["root"]
        for g in G:
            if g == root and in_place:
                continue
            eff.append((g, out, whole(out, g), copy_from(inp, root,
                                                         slice(None))))
    elif kind == "reduce":
        root = op["root"]
        # Off the root the backend reduces into scratch: the caller's
        # tensors there keep their bytes.
        eff.append((root, out, whole(out, root), reduced()))
    elif kind in ("all_gather", "gather"):
        targets = G if kind == "all_gather" else [op["root"]]
        if in_place:
            n = cells[(inp, G[0])].values.size // k

            def chunks(c, n=n):
                vals = np.concatenate([c[(inp, g)].values[i * n:(i + 1) * n]
                                       for i, g in enumerate(G)])
                known = np.concatenate([c[(inp, g)].known[i * n:(i + 1) * n]
                                        for i, g in enumerate(G)])
                return vals, known, any(c[(inp, g)].inexact for g in G)
        else:
            def chunks(c):
                vals = np.concatenate([c[(inp, g)].values for g in G])
                known = np.concatenate([c[(inp, g)].known for g in G])
                return vals, known, any(c[(inp, g)].inexact for g in G)
        for g in targets:
            eff.append((g, out, whole(out, g), chunks))
    elif kind == "reduce_scatter":
        n = cells[(inp, G[0])].values.size // k
        for i, g in enumerate(G):
            sl = slice(i * n, (i + 1) * n)
            eff.append((g, out, sl if in_place else whole(out, g),
                        reduced(sl)))
    elif kind == "scatter":
        root = op["root"]
        n = cells[(inp, root)].values.size // k
        for i, g in enumerate(G):
            sl = slice(i * n, (i + 1) * n)
            if in_place and g == root:
                continue  # its own chunk onto itself
            eff.append((g, out, sl if in_place else whole(out, g),
                        copy_from(inp, root, sl)))
    elif kind == "all_to_all":
        n = cells[(inp, G[0])].values.size // k
        for i, g in enumerate(G):
            def a2a(c, i=i):
                vals = np.concatenate([c[(inp, h)].values[i * n:(i + 1) * n]
                                       for h in G])
                known = np.concatenate([c[(inp, h)].known[i * n:(i + 1) * n]
                                        for h in G])
                return vals, known, any(c[(inp, h)].inexact for h in G)
            eff.append((g, out, whole(out, g), a2a))
    elif kind == "send":
        src, dst = op["src"], op["dst"]
        recv = op.get("recv_tensor") or inp
        eff.append((dst, recv, whole(recv, dst), copy_from(inp, src,
                                                           slice(None))))
    elif kind == "barrier":
        pass
    else:
        raise ValueError(f"no model for op {kind!r}")
    return eff


def tensors_of(op):
    """(name, rank) pairs an op reads or writes, for its preconditions."""
    kind = op["kind"]
    G = op["ranks"]
    inp = op.get("input")
    out = op.get("output") or inp
    if kind == "barrier":
        return []
    if kind == "send":
        return [(inp, op["src"]),
                (op.get("recv_tensor") or inp, op["dst"])]
    pairs = []
    for g in G:
        if kind == "gather" and g != op["root"] and out != inp:
            pairs.append((inp, g))
        elif kind == "scatter" and g != op["root"] and out != inp:
            pairs.append((out, g))
        else:
            pairs.append((inp, g))
            pairs.append((out, g))
    return list(dict.fromkeys(pairs))


def apply(op, cells, success):
    """Applies `op` to `cells` in place: on success the values it writes,
    on failure unknown over the same elements. Returns the written
    (rank, name) pairs."""
    eff = effects(op, cells)
    # Compute every source before writing anything: outputs may alias
    # inputs (in place).
    computed = []
    for rank, name, sl, source in eff:
        computed.append((rank, name, sl, source(cells) if success else None))
    for rank, name, sl, result in computed:
        cell = cells[(name, rank)]
        if result is None:
            cell.known[sl] = False
        else:
            vals, known, inexact = result
            cell.values[sl] = vals
            cell.known[sl] = known
            cell.inexact = cell.inexact or inexact
    return [(rank, name) for rank, name, _, _ in eff]


def compare(dtype, cell, got):
    """Differences between a cell and values read: a list of
    (index, expected, got), at most a few."""
    got = np.asarray(got).reshape(-1)
    if got.size != cell.values.size:
        return [(-1, f"{cell.values.size} elements", f"{got.size}")]
    exp = cell.values
    known = cell.known
    if is_int(dtype):
        bad = known & (exp.astype(np.int64) != got.astype(np.int64))
    else:
        # Elements no op wrote may hold any bytes; a signalling NaN among
        # them makes the widening cast warn, and they are masked out of `bad`.
        with np.errstate(invalid="ignore"):
            e64, g64 = exp.astype(np.float64), got.astype(np.float64)
        if cell.inexact:
            rtol = tolerance(dtype)
            bad = known & ~np.isclose(g64, e64, rtol=rtol, atol=rtol)
        else:
            bad = known & ~((e64 == g64) | (np.isnan(e64) & np.isnan(g64)))
    idx = np.nonzero(bad)[0]
    return [(int(i), exp[i].item(), got[i].item()) for i in idx[:4]]
