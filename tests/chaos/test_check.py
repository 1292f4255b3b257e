"""The chaos checker and its model, without a cluster: every rule must catch
the history that breaks it (a checker that passes everything proves
nothing), and the model must give torch.distributed's values."""

import json
import os
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import check  # noqa: E402
import model  # noqa: E402


def cells_of(name, per_rank, dtype="float32"):
    return {(name, r): model.Cell(np.array(v, model.NP[dtype]),
                                  np.ones(len(v), bool))
            for r, v in per_rank.items()}


def op(kind, ranks=(0, 1, 2), **kw):
    d = {"kind": kind, "ranks": list(ranks), "dtype": "float32", "group": "world",
         "reduce": None, "scale": 1.0, "root": None, "input": "x",
         "output": None}
    d.update(kw)
    return d


# -- the model ------------------------------------------------------------


def test_all_reduce_every_reduce_op():
    data = {0: [1, 2], 1: [3, -4], 2: [2, 2]}
    want = {"sum": [6, 0], "prod": [6, -16], "min": [1, -4], "max": [3, 2],
            "avg": [2, 0], "premul_sum": [3, 0]}
    for red, expected in want.items():
        c = cells_of("x", data)
        model.apply(op("all_reduce", reduce=red, scale=0.5), c, True)
        for r in range(3):
            assert list(c[("x", r)].values) == expected, red


def test_int_avg_truncates_toward_zero():
    c = cells_of("x", {0: [-5, 5], 1: [0, 0]}, "int32")
    model.apply(op("all_reduce", ranks=(0, 1), dtype="int32", reduce="avg"),
                c, True)
    assert list(c[("x", 0)].values) == [-2, 2]


def test_reduce_leaves_non_roots_alone_and_keeps_the_input():
    c = cells_of("x", {0: [1], 1: [2], 2: [3]})
    c.update(cells_of("y", {0: [9], 1: [9], 2: [9]}))
    model.apply(op("reduce", reduce="sum", root=1, output="y"), c, True)
    assert [c[("y", r)].values[0] for r in range(3)] == [9, 6, 9]
    assert [c[("x", r)].values[0] for r in range(3)] == [1, 2, 3]


def test_gather_scatter_all_to_all_and_in_place_chunks():
    c = cells_of("x", {0: [1, 2], 1: [3, 4], 2: [5, 6]})
    c.update(cells_of("y", {0: [0] * 6, 1: [0] * 6, 2: [0] * 6}))
    model.apply(op("gather", root=2, output="y"), c, True)
    assert list(c[("y", 2)].values) == [1, 2, 3, 4, 5, 6]
    assert list(c[("y", 0)].values) == [0] * 6
    # In-place all_gather: each rank contributes its own chunk.
    t = cells_of("t", {0: [1, 0, 0], 1: [0, 2, 0], 2: [0, 0, 3]})
    model.apply(op("all_gather", input="t"), t, True)
    assert all(list(t[("t", r)].values) == [1, 2, 3] for r in range(3))
    # In-place scatter writes only each rank's own chunk.
    s = cells_of("s", {0: [7, 8, 9], 1: [0, 0, 0], 2: [5, 5, 5]})
    model.apply(op("scatter", input="s", root=0), s, True)
    assert list(s[("s", 1)].values) == [0, 8, 0]
    assert list(s[("s", 2)].values) == [5, 5, 9]
    a = cells_of("a", {0: [1, 2, 3], 1: [4, 5, 6], 2: [7, 8, 9]})
    a.update(cells_of("b", {r: [0, 0, 0] for r in range(3)}))
    model.apply(op("all_to_all", input="a", output="b"), a, True)
    assert list(a[("b", 1)].values) == [2, 5, 8]


def test_failure_unknowns_exactly_what_the_op_could_write():
    c = cells_of("x", {0: [1, 2, 3], 1: [4, 5, 6], 2: [7, 8, 9]})
    c.update(cells_of("y", {r: [0] for r in range(3)}))
    model.apply(op("reduce_scatter", reduce="sum", output="y"), c, False)
    assert not any(c[("y", r)].known.any() for r in range(3))
    assert all(c[("x", r)].known.all() for r in range(3))
    s = cells_of("s", {0: [7, 8, 9], 1: [1, 1, 1], 2: [5, 5, 5]})
    model.apply(op("scatter", input="s", root=0), s, False)
    assert list(s[("s", 1)].known) == [True, False, True]


def test_send_writes_the_receiver_only():
    c = cells_of("x", {0: [1, 2], 1: [0, 0], 2: [5, 5]})
    model.apply(op("send", src=0, dst=1, input="x"), c, True)
    assert list(c[("x", 1)].values) == [1, 2]
    assert list(c[("x", 2)].values) == [5, 5]


# -- the checker ------------------------------------------------------------


class History:
    """Writes a run directory the way chaos.py and workload.py do."""

    def __init__(self, tmp_path):
        self.dir = str(tmp_path)
        self.t = 100.0
        self.i = 0
        self.lines = []
        self.faults = []
        self.daemons = []

    def _op(self, kind, ok=True, took=0.01, errs=None, end=None, **fields):
        self.i += 1
        t0 = self.t
        self.t += took
        self.lines.append({"c": "c1", "i": self.i, "ev": "begin",
                           "kind": kind, "t0": t0, **fields})
        e = {"c": "c1", "i": self.i, "ev": "end", "ok": ok, "t1": self.t}
        if errs:
            e["errs"] = errs
        e.update(end or {})
        self.lines.append(e)
        self.t += 0.01

    def alloc(self, name, values, dtype="float32"):
        self._op("alloc", name=name, dtype=dtype, numel=len(values[0]),
                 ranks=sorted(values), fill="zeros", params={})
        self.write(name, values, dtype)

    def write(self, name, values, dtype="float32", errs=None):
        self._op("write", ok=not errs, errs=errs, name=name, dtype=dtype,
                 values={str(r): model.encode(np.array(v, model.NP[dtype]))
                         for r, v in values.items()})

    def read(self, name, got, dtype="float32", errs=None):
        self._op("read", ok=not errs, errs=errs, name=name, dtype=dtype,
                 numel=len(next(iter(got.values()))) if got else 0,
                 ranks=sorted(got), end={"got": {
                     str(r): model.encode(np.array(v, model.NP[dtype]))
                     for r, v in got.items()}})

    def collective(self, ok=True, took=0.01, errs=None, timeout=3.0, **kw):
        self._op("op", ok=ok, took=took, errs=errs, op=op(**kw),
                 timeout=timeout, is_async=False)

    def fault(self, start, recovered, kind="kill"):
        self.faults.append({"ev": "fault", "kind": kind, "t_start": start,
                            "t_end": start, "t_recovered": recovered,
                            "recovery_s": recovered - start})

    def check(self, deaths=(), allow_dropped_groups=False, rss_after=None):
        def dump(name, rows):
            with open(os.path.join(self.dir, name), "w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
        dump("client-c1.jsonl", self.lines + [{"c": "c1", "ev": "done"}])
        dump("faults.jsonl", self.faults)
        dump("daemons.jsonl", self.daemons)
        dump("world.jsonl", [])
        args = types.SimpleNamespace(
            allow_dropped_groups=allow_dropped_groups, op_timeout=3.0, seed=1,
            rss_after=rss_after, rss_limit=0.05)
        return check.check(self.dir, args, deaths)


def kinds(report):
    return sorted({v["kind"] for v in report["violations"]})


def test_a_history_that_checks_out(tmp_path):
    h = History(tmp_path)
    h.alloc("x", {0: [1, 2], 1: [3, 4]})
    h.collective(kind="all_reduce", ranks=(0, 1), reduce="sum")
    h.read("x", {0: [4, 6], 1: [4, 6]})
    report = h.check()
    assert report["ok"], report["violations"]
    assert report["stats"]["reads_checked"] == 2


def test_a_wrong_sum_is_caught(tmp_path):
    h = History(tmp_path)
    h.alloc("x", {0: [1, 2], 1: [3, 4]})
    h.collective(kind="all_reduce", ranks=(0, 1), reduce="sum")
    h.read("x", {0: [4, 6], 1: [4, 7]})
    report = h.check()
    assert kinds(report) == ["wrong value"]
    assert "rank 1" in report["violations"][0]["text"]


def test_an_input_that_lost_its_bytes_is_caught_even_after_a_failure(
        tmp_path):
    h = History(tmp_path)
    h.fault(99.0, 200.0)
    h.alloc("x", {0: [1], 1: [2]})
    h.alloc("y", {0: [0], 1: [0]})
    h.collective(ok=False, errs={"0": ["UNAVAILABLE", "peer reset"]},
                 kind="all_reduce", ranks=(0, 1), reduce="sum", output="y")
    h.read("y", {0: [123], 1: [-5]})   # unknown after the failure: fine
    h.read("x", {0: [1], 1: [3]})      # the input must have kept its bytes
    assert kinds(h.check()) == ["wrong value"]


def test_a_failure_with_no_fault_in_progress_is_unexplained(tmp_path):
    h = History(tmp_path)
    h.alloc("x", {0: [1], 1: [2]})
    h.collective(ok=False, errs={"0": ["UNAVAILABLE", "peer reset"]},
                 kind="barrier", ranks=(0, 1), input=None)
    assert kinds(h.check()) == ["unexplained"]
    h2 = History(tmp_path)
    h2.fault(100.0, 100.5)
    h2.alloc("x", {0: [1], 1: [2]})
    h2.collective(ok=False, errs={"0": ["UNAVAILABLE", "peer reset"]},
                  kind="barrier", ranks=(0, 1), input=None)
    assert h2.check()["ok"]


def test_codes_outside_the_allowed_set_are_caught(tmp_path):
    h = History(tmp_path)
    h.fault(100.0, 200.0)
    h.alloc("x", {0: [1], 1: [2]})
    h.collective(ok=False, errs={"1": ["INTERNAL", "boom"]},
                 kind="all_reduce", ranks=(0, 1), reduce="sum")
    h.collective(ok=False, errs={"0": ["NOT_FOUND", "no tensor named 'x'"]},
                 kind="all_reduce", ranks=(0, 1), reduce="sum")
    report = h.check()
    assert kinds(report) == ["bad code"]
    assert len(report["violations"]) == 2


def test_a_subgroup_a_re_form_dropped_is_caught(tmp_path):
    # Workers make every subgroup again on a re-form, so even during a fault
    # a group that vanished is a bad code.
    h = History(tmp_path)
    h.fault(100.0, 200.0)
    h._op("new_group", group="g", ranks=[1, 0])
    h.collective(ok=False, errs={"0": ["NOT_FOUND", "no group named 'g'"]},
                 kind="barrier", ranks=(1, 0), input=None, group="g")
    report = h.check()
    assert kinds(report) == ["bad code"]
    assert "subgroup dropped" in report["violations"][0]["text"]
    assert report["stats"]["groups_dropped"] == 1
    assert h.check(allow_dropped_groups=True)["ok"]


def test_not_found_after_the_rank_was_replaced_is_allowed(tmp_path):
    h = History(tmp_path)
    h.fault(100.0, 200.0)
    h.alloc("x", {0: [1], 1: [2]})
    h.daemons.append({"ev": "signal", "proc": "w0", "sig": 9,
                      "t": h.t + 0.001})
    h.t += 0.01
    h.collective(ok=False, errs={"0": ["NOT_FOUND", "no tensor named 'x'"]},
                 kind="all_reduce", ranks=(0, 1), reduce="sum")
    assert h.check()["ok"]


def test_ranks_failing_an_op_a_replaced_rank_refused_are_explained(
        tmp_path):
    # Long after its restart, rank 0 refuses an op on a tensor it lost; the
    # rank that accepted it fails it naming rank 0. Both are explained by
    # the replacement; without it, the NOT_FOUND is a bad code and the
    # other rank's failure is unexplained.
    refused = ["FAILED_PRECONDITION", "all_reduce seq 5 of group world: seq "
               "5 was refused at rank 0 (its caller there was told why)"]
    for replaced in (True, False):
        h = History(tmp_path / str(replaced))
        os.makedirs(h.dir)
        h.fault(100.0, 100.05)
        h.alloc("x", {0: [1], 1: [2]})
        if replaced:
            h.daemons.append({"ev": "signal", "proc": "w0", "sig": 9,
                              "t": h.t + 0.001})
        h.t += 20.0
        h.collective(ok=False, errs={
            "0": ["NOT_FOUND", "no tensor named 'x' (an input) on rank 0"],
            "1": refused}, kind="all_reduce", ranks=(0, 1), reduce="sum")
        report = h.check()
        if replaced:
            assert report["ok"], report["violations"]
        else:
            assert kinds(report) == ["bad code", "unexplained"]


def test_slow_ops_and_unanswered_rpcs_are_caught(tmp_path):
    h = History(tmp_path)
    h.fault(100.0, 200.0)
    h.collective(ok=True, took=3.0 + check.BOUND_S + 1, kind="barrier",
                 ranks=(0, 1), input=None)
    h.collective(ok=False, took=8.5,
                 errs={"1": ["DEADLINE_EXCEEDED", "Deadline Exceeded"]},
                 kind="barrier", ranks=(0, 1), input=None)
    assert kinds(h.check()) == ["client deadline", "too slow"]
    # The same unanswered RPC from a rank that was stopped is expected.
    h2 = History(tmp_path)
    h2.fault(100.0, 200.0)
    h2.daemons += [{"ev": "signal", "proc": "w1", "sig": 19, "t": 100.0},
                   {"ev": "signal", "proc": "w1", "sig": 18, "t": 150.0}]
    h2.collective(ok=False, took=8.5,
                  errs={"1": ["DEADLINE_EXCEEDED", "Deadline Exceeded"]},
                  kind="barrier", ranks=(0, 1), input=None)
    assert h2.check()["ok"]


def test_a_slow_fault_passes_only_when_the_doctor_named_its_rank_first(
        tmp_path):
    def slow(h, first, rank=2, **verdict):
        h.fault(110.0, 112.0, kind="slow")
        h.faults[-1].update(target=f"w{rank}", rank=rank,
                            doctor={"exit": 3 if first else 0,
                                    "first": first, **verdict})

    named = {"blame": "rank", "ranks": [2], "metric": "bandwidth",
             "evidence": "its bandwidth ..."}
    h = History(tmp_path / "named")
    os.makedirs(h.dir)
    slow(h, named)
    report = h.check()
    assert report["ok"], report["violations"]
    assert report["doctor"] == {"slow_faults": 1, "named_first": 1}
    for first, verdict in [
            ({**named, "ranks": [1]}, {}),                  # another rank
            ({**named, "blame": "link", "ranks": [2, 1]}, {}),  # a link
            (None, {}),                                     # nothing
            (None, {"error": "no document"})]:              # did not run
        h = History(tmp_path / f"missed{len(os.listdir(tmp_path))}")
        os.makedirs(h.dir)
        slow(h, first, **verdict)
        report = h.check()
        assert kinds(report) == ["doctor missed"], first
        assert report["doctor"]["named_first"] == 0


def test_a_daemon_that_died_unasked_fails_the_run(tmp_path):
    h = History(tmp_path)
    report = h.check(deaths=[{"proc": "w2", "t": 1.0, "rc": -13,
                              "log": "ready (generation 39)"}])
    assert kinds(report) == ["daemon died"]
    assert report["daemons_died_unasked"] == 1


def test_a_worker_is_judged_on_its_rss_less_its_tensors(tmp_path):
    # 60 samples after a 10 s warm-up: the worker's RSS climbs by 40 MiB of
    # tensors a client keeps (its own memory flat), the coordinator's by 10%.
    ts = [float(t) for t in range(0, 140, 2)]
    held = [0 if t < 70 else 40 * 1024 for t in ts]
    rss = {"w0.1": [(t, 100_000 + h) for t, h in zip(ts, held)],
           "coord.1": [(t, 20_000 * (1.10 if t >= 70 else 1.0)) for t in ts]}
    net = {"w0.1": [(t, 100_000.0) for t in ts]}
    for name, rows in (("rss.json", rss), ("rss_net.json", net)):
        with open(os.path.join(str(tmp_path), name), "w") as f:
            json.dump(rows, f)
    report = History(tmp_path).check(rss_after=10)
    assert kinds(report) == ["memory"]
    assert [v["text"] for v in report["violations"]][0].startswith(
        "coord.1: rss grew 10.0%")
    assert report["rss_growth"]["w0.1"]["measure"] == "rss-tensors"
    assert report["rss_growth"]["w0.1"]["growth"] == 0
    assert report["rss_growth"]["w0.1"]["raw_growth"] > 0.4
    # The worker's own memory growing is caught the same way.
    net["w0.1"] = [(t, 100_000.0 * (1.06 if t >= 70 else 1.0)) for t in ts]
    with open(os.path.join(str(tmp_path), "rss_net.json"), "w") as f:
        json.dump(net, f)
    report = History(tmp_path).check(rss_after=10)
    assert sorted(v["text"].split(":")[0]
                  for v in report["violations"]) == ["coord.1", "w0.1"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
