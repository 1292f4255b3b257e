"""bench() returns what `ccctl -o json bench` prints, figure for figure in
shape: the same keys, sizes and counts, results checked on the workers."""

import json
import os
import subprocess

import pytest

import ccl
from conftest import WORKERS


def ccctl_bench(cluster, *args):
    run = subprocess.run(
        [os.environ["CCL_BINARY_CCCTL"], "--coordinator", cluster.coordinator,
         "-o", "json", "bench", *args],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter",
                                "broadcast", "alltoall", "sendrecv"])
def test_same_document_as_ccctl(client, cluster, op):
    mine = client.bench(op, "8", "4K", stepfactor=8, iters=3, warmup=1,
                        check=True)
    theirs = ccctl_bench(cluster, op, "-b", "8", "-e", "4K", "-f", "8",
                         "-n", "3", "-w", "1", "-c", "1")
    assert set(mine) == set(theirs)
    for key in ("op", "ranks", "type", "redop", "root", "iters", "warmup"):
        assert mine[key] == theirs[key], key
    assert [r["size"] for r in mine["rows"]] == \
        [r["size"] for r in theirs["rows"]]
    assert [r["count"] for r in mine["rows"]] == \
        [r["count"] for r in theirs["rows"]]
    for row, other in zip(mine["rows"], theirs["rows"]):
        assert list(row) == list(other) or set(row) == set(other)
        assert set(row["in_place"]) == set(other["in_place"])
        assert row["wrong"] == 0 and row["in_place"]["wrong"] == 0
        assert row["time_us"] > 0 and row["busbw"] > 0
        assert row["op_min_us"] <= row["time_us"] <= row["op_max_us"] * 1.01
    # Nothing left behind on the workers.
    for r in range(WORKERS):
        assert client.list_tensors(r) == []


def test_bus_factor_and_e2e(client):
    doc = client.bench("all_reduce", 1 << 16, iters=2, warmup=1, e2e=True)
    (row,) = doc["rows"]
    assert row["size"] == 1 << 16 and row["count"] == (1 << 16) // 4
    assert row["algbw"] == pytest.approx(row["size"] / row["time_us"] / 1e3)
    assert row["busbw"] == pytest.approx(
        row["algbw"] * 2 * (WORKERS - 1) / WORKERS)
    assert row["e2e_us"] > 0
    assert doc["avg_busbw"] > 0


def test_bench_in_group_and_errors(client):
    pair = client.new_group([0, 1])
    doc = client.bench("broadcast", "1K", group=pair, root=1, iters=2,
                       warmup=0)
    assert doc["ranks"] == 2 and doc["root"] == 1
    with pytest.raises(ccl.InvalidArgument):
        client.bench("all_wiggle")
    with pytest.raises(ccl.InvalidArgument):
        client.bench("all_reduce", "1M", "1K")
    with pytest.raises(ccl.InvalidArgument):
        client.bench("all_reduce", "lots")
