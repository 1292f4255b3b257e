"""The trace: a known sequence of ops (a lone recv that timed out among
them), then the JSON from ccl.trace() and from `ccctl debug trace`, each
checked slice by slice and arrow by arrow."""

import json
import os
import subprocess

import numpy as np
import pytest

import ccl
from conftest import WORKERS

RANKS = list(range(WORKERS))


@pytest.fixture(scope="module")
def traced(cluster):
    """Runs the sequence once; returns the two generations, the group and
    the seqs. The lone recv breaks the world, which re-forms at the next
    generation and drops its subgroups, so the group is made after it."""
    with ccl.Client(cluster.coordinator, timeout=30) as c:
        generation = c.generation
        t = c.from_numpy(lambda r: np.full(4, r + 1.0, np.float32))
        seqs = {}
        seqs["all_reduce"] = c.all_reduce(t).seq
        seqs["broadcast"] = c.broadcast(t, src=RANKS[-1]).seq
        seqs["send"] = c.send(t, dst=1, src=0).seq
        with pytest.raises(ccl.CclError) as e:
            c.recv(t, src=0, dst=1, timeout=1)
        assert e.value.code_name == "DEADLINE_EXCEEDED"
        c.wait_ready(60, min_generation=generation + 1)
        after_generation = c.generation
        pair = c.new_group([1, 0], name="py-trace-pair")
        # Seqs start again in a generation: the trace tells them apart.
        seqs["after"] = c.all_reduce(t).seq
        seqs["pair_all_reduce"] = c.all_reduce(t, group=pair).seq
        t.free()
    return generation, after_generation, pair, seqs


def slices_of(trace, **match):
    out = []
    for e in trace["traceEvents"]:
        if e["ph"] != "X":
            continue
        if all(e["args"].get(k) == v for k, v in match.items()):
            out.append(e)
    return out


def check_trace(trace, generation, after_generation, pair, seqs):
    json.dumps(trace)  # plain JSON
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ms"
    other = trace["otherData"]
    assert sorted(other["clocks"]) == sorted(str(r) for r in RANKS)
    for clock in other["clocks"].values():
        assert {"host", "offset_us", "uncertainty_us",
                "applied"} <= set(clock)
        assert clock["uncertainty_us"] >= 0
    assert "errors" not in other

    # One process per rank, a thread per group it belongs to.
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names) == RANKS
    assert all(names[r].startswith(f"rank {r} (") for r in RANKS)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    world_tid = [k[1] for k, v in threads.items() if v == "group world"][0]
    pair_tid = [k[1] for k, v in threads.items()
                if v == f"group {pair.name}"][0]
    assert {k[0] for k, v in threads.items()
            if v == f"group {pair.name}"} == set(pair.ranks)

    xs = [e for e in events if e["ph"] == "X"]
    assert xs and all(e["ts"] >= 0 and e["dur"] >= 0 for e in xs)

    def one(rank, **match):
        found = [e for e in slices_of(trace, **match) if e["pid"] == rank]
        assert len(found) == 1, (rank, match, found)
        return found[0]

    g = generation
    for name in ("all_reduce", "broadcast"):
        for r in RANKS:
            e = one(r, seq=seqs[name], group="world", generation=g)
            assert e["name"] == name and e["tid"] == world_tid
            assert e["args"]["state"] == "completed"
            assert e["args"]["dtype"] == "float32"
            assert e["args"]["count"] == 4 and e["args"]["bytes"] == 16
    assert one(0, seq=seqs["broadcast"], generation=g)["args"]["root"] == \
        RANKS[-1]
    assert one(0, seq=seqs["all_reduce"], generation=g)["args"][
        "reduce_op"] == "sum"
    send = one(0, seq=seqs["send"], generation=g)
    recv = one(1, seq=seqs["send"], generation=g)
    assert (send["name"], send["args"]["peer"]) == ("send", 1)
    assert (recv["name"], recv["args"]["peer"]) == ("recv", 0)
    # The nop ranks of a p2p op draw nothing.
    for r in RANKS[2:]:
        assert not [e for e in slices_of(trace, seq=seqs["send"],
                                         generation=g) if e["pid"] == r]
    # The group op: on the pair's track, peer and root in world ranks.
    for r in pair.ranks:
        e = one(r, seq=seqs["pair_all_reduce"], group=pair.name,
                generation=after_generation)
        assert e["tid"] == pair_tid

    # The lone recv: failed, marked, its error kept.
    failed = [e for e in xs if e["name"] == "recv FAILED"]
    assert len(failed) == 1
    lone = failed[0]
    assert lone["pid"] == 1 and lone["args"]["state"] == "failed"
    assert lone["args"]["generation"] == g
    assert lone["args"]["error"].startswith("DEADLINE_EXCEEDED: ")
    assert "no matching send" in lone["args"]["error"]
    assert lone.get("cname") == "terrible"
    marks = [e for e in events if e["ph"] == "i" and e["pid"] == 1]
    assert any(m["name"] == "recv failed: DEADLINE_EXCEEDED" and
               m["ts"] == pytest.approx(lone["ts"] + lone["dur"], abs=1e-3)
               for m in marks)
    # Its seq ran nothing on rank 0 but a nop: no slice there.
    assert not [e for e in slices_of(trace, seq=lone["args"]["seq"],
                                     generation=g) if e["pid"] == 0]

    # The op of the next generation, at a seq the old one used too.
    for r in RANKS:
        e = one(r, seq=seqs["after"], group="world",
                generation=after_generation)
        assert e["args"]["state"] == "completed"

    # Ops of one track are in seq order in time.
    for r in RANKS:
        track = sorted((e for e in xs if e["pid"] == r and
                        e["tid"] == world_tid and
                        e["args"]["generation"] == g),
                       key=lambda e: e["args"]["seq"])
        starts = [e["ts"] for e in track]
        assert starts == sorted(starts), (r, starts)

    # Flows: each an s/f pair with one id, bound inside its slices.
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and sorted(starts) == sorted(finishes)
    assert all(f["bp"] == "e" for f in finishes.values())

    def inside(point):
        return [e for e in xs if e["pid"] == point["pid"] and
                e["tid"] == point["tid"] and
                e["ts"] <= point["ts"] <= e["ts"] + e["dur"]]

    arrows = set()
    for i, s in starts.items():
        f = finishes[i]
        assert s["name"] == f["name"]
        src, dst = inside(s), inside(f)
        assert len(src) >= 1 and len(dst) >= 1, (s, f)
        key = (src[0]["args"]["generation"], src[0]["args"]["group"],
               src[0]["args"]["seq"])
        assert key == (dst[0]["args"]["generation"], dst[0]["args"]["group"],
                       dst[0]["args"]["seq"])
        assert s["name"] == f"{key[1]} seq {key[2]}"
        arrows.add((key, s["pid"], f["pid"]))

    def arrows_of(name, group="world", gen=g):
        return {(a, b) for (k, a, b) in arrows if k == (gen, group,
                                                        seqs[name])}

    # A collective: from the rank that started last to every other rank.
    for name in ("all_reduce", "broadcast"):
        last = one(0, seq=seqs[name], generation=g)["args"]["last_arrival"]
        assert all(one(r, seq=seqs[name], generation=g)["args"][
            "last_arrival"] == last for r in RANKS)
        assert arrows_of(name) == {(last, r) for r in RANKS if r != last}
    # The send: one arrow, sender to receiver.
    assert arrows_of("send") == {(0, 1)}
    assert len(arrows_of("pair_all_reduce", pair.name,
                         after_generation)) == 1
    # The lone recv has no partner, so no arrow.
    assert not [k for (k, _, _) in arrows
                if k == (g, "world", lone["args"]["seq"])]


def test_python_trace(traced, cluster, tmp_path):
    generation, after, pair, seqs = traced
    path = tmp_path / "trace.json"
    with ccl.Client(cluster.coordinator) as c:
        returned = c.trace(str(path))
    with open(path) as f:
        loaded = json.load(f)
    assert loaded == json.loads(json.dumps(returned))
    assert loaded["otherData"]["generator"] == "ccl.trace (python)"
    check_trace(loaded, generation, after, pair, seqs)


def test_ccctl_trace(traced, cluster, tmp_path):
    generation, after, pair, seqs = traced
    path = tmp_path / "trace.json"
    run = subprocess.run(
        [os.environ["CCL_BINARY_CCCTL"], "--coordinator", cluster.coordinator,
         "debug", "trace", "-o", str(path)],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert f"wrote {path}" in run.stdout
    assert "ui.perfetto.dev" in run.stdout
    with open(path) as f:
        loaded = json.load(f)
    assert loaded["otherData"]["generator"] == "ccctl debug trace"
    check_trace(loaded, generation, after, pair, seqs)


def test_ccctl_trace_to_stdout_and_one_group(traced, cluster):
    _, _, pair, _ = traced
    run = subprocess.run(
        [os.environ["CCL_BINARY_CCCTL"], "--coordinator", cluster.coordinator,
         "debug", "trace", "--groups", pair.name],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    trace = json.loads(run.stdout)
    groups = {e["args"]["group"] for e in trace["traceEvents"]
              if e["ph"] == "X"}
    assert groups == {pair.name}


def test_trace_of_unknown_group(traced, cluster):
    with ccl.Client(cluster.coordinator) as c:
        with pytest.raises(ccl.CclError) as e:
            c.trace(groups=["py-no-such-group"])
        assert e.value.code_name == "NOT_FOUND"
    run = subprocess.run(
        [os.environ["CCL_BINARY_CCCTL"], "--coordinator", cluster.coordinator,
         "debug", "trace", "--groups", "py-no-such-group"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "NOT_FOUND" in run.stderr
