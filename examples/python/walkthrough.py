# %% [markdown]
# # ccl from Python: a walkthrough
#
# Cells in the `# %%` format: open this file in Jupyter (with jupytext) or
# VS Code and run it cell by cell, or run it whole with
# `/usr/bin/python3 examples/python/walkthrough.py` against a running
# cluster (`ccctl cluster up --workers 2`). Every printed line is checked in
# CI, so nothing printed here depends on timing.

# %%
import os
import tempfile

import numpy as np

import ccl

client = ccl.connect()  # CCCTL_COORDINATOR, else the local cluster
print(f"world size {client.world_size}, generation {client.generation > 0}")

# %% [markdown]
# Tensors live on the workers, one per rank, under a name. Make them with
# a fill (computed on the worker), or from numpy: the same array
# everywhere, a dict {rank: array}, or a function of the rank.

# %%
x = client.from_numpy(lambda rank: np.arange(4) * (rank + 1),
                      dtype="float32", name="walkthrough.x")
print(x)
print(x.read(0), x.read(1))

# %% [markdown]
# Collectives have torch.distributed's names and arguments. A sync call
# returns a completed ccl.Work with each rank's timing; async_op=True
# returns at once.

# %%
work = client.all_reduce(x, op=ccl.ReduceOp.MAX)
print(x.read(0))
pending = client.all_reduce(x, op=ccl.ReduceOp.SUM, async_op=True)
pending.wait()
print(x.read(1), pending.is_completed())

# %% [markdown]
# Results come back as numpy arrays, so a reference check is one line.

# %%
data = {r: np.random.default_rng(r).random(1000).astype(np.float32)
        for r in range(client.world_size)}
with client.from_numpy(data) as y:
    client.all_reduce(y)
    expected = sum(data.values())
    print("matches numpy:", all(np.allclose(v, expected, rtol=1e-5)
                                for v in y.read().values()))

# %% [markdown]
# Subgroups: new_group(ranks). Ranks stay world ranks.

# %%
pair = client.new_group([1, 0])
with client.from_numpy(lambda rank: [10.0 * rank]) as z:
    client.broadcast(z, src=1, group=pair)
    print({r: v.tolist() for r, v in z.read().items() if r in pair.ranks})

# %% [markdown]
# Errors are ccl.CclError with the gRPC code, the rank and the worker's
# message.

# %%
try:
    client.all_reduce("no-such-tensor")
except ccl.CclError as e:
    print(e.code_name, "on ranks", sorted(e.errors))

# %% [markdown]
# bench() gives ccctl bench's rows as Python data, ready for matplotlib:
# `plt.loglog([r["size"] for r in rows], [r["busbw"] for r in rows])`.

# %%
rows = client.bench("all_reduce", "1K", "64K", stepfactor=4, iters=5,
                    warmup=1, check=True)["rows"]
print([r["size"] for r in rows], "wrong:", sum(r["wrong"] for r in rows))

# %% [markdown]
# What the cluster did, as a picture: open the file in ui.perfetto.dev or
# chrome://tracing (one track per rank and group, one slice per op, arrows
# between the ranks of one op).

# %%
path = os.path.join(tempfile.mkdtemp(), "trace.json")
trace = client.trace(path)
print("ranks in the trace:",
      sorted({e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"}))

# %%
client.close()  # frees x and everything else this client made

# Expected output (2 ranks):
# world size 2, generation True
# Tensor('walkthrough.x', shape=[4], dtype=float32, ranks=[0, 1])
# [0. 1. 2. 3.] [0. 2. 4. 6.]
# [0. 2. 4. 6.]
# [ 0.  4.  8. 12.] True
# matches numpy: True
# {0: [10.0], 1: [10.0]}
# NOT_FOUND on ranks [0, 1]
# [1024, 4096, 16384, 65536] wrong: 0
# ranks in the trace: [0, 1]
