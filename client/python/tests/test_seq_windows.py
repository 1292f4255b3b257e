"""The client's sequence windows without a cluster: a fake coordinator that
hands out consecutive numbers, a fake worker side that records releases, a
timer that runs when the test says and a clock the test moves (the same
cases as the C++ client's tests/unit/sequence_windows_test.cc)."""

import itertools
import json
import os
import pathlib

import pytest

from ccl._seqs import SequenceWindows


class Fakes:
    def __init__(self, generation=1):
        self.generation = generation
        self.next_seq = 0
        self.reserved = []   # (group, count) per coordinator call
        self.released = []   # (group, generation, begin, end)
        self.timers = []     # (delay, callback) not yet run
        self.now = 100.0

    def reserve(self, group, count):
        self.reserved.append((group, count))
        first = self.next_seq
        self.next_seq += count
        return first, self.generation

    def release(self, group, generation, begin, end):
        self.released.append((group, generation, begin, end))

    def schedule(self, delay, callback):
        self.timers.append((delay, callback))

    def run_timers(self):
        timers, self.timers = self.timers, []
        for _, callback in timers:
            callback()

    def windows(self, **kw):
        return SequenceWindows(self.reserve, self.release, self.schedule,
                               clock=lambda: self.now, **kw)


def test_a_loop_reserves_doubling_windows_and_takes_consecutive_seqs():
    f = Fakes()
    w = f.windows()
    seqs = [w.take("world", 1) for _ in range(15)]
    assert seqs == [(s, 1) for s in range(15)]
    assert [count for _, count in f.reserved] == [1, 2, 4, 8]
    assert w.held("world") == (15, 15)
    assert f.released == []


def test_the_window_stops_growing_at_its_cap():
    f = Fakes()
    w = f.windows(max_window=4)
    for _ in range(20):
        w.take("world", 1)
    assert [count for _, count in f.reserved] == [1, 2, 4, 4, 4, 4, 4]


def test_a_single_op_reserves_one_seq_and_holds_nothing():
    f = Fakes()
    w = f.windows()
    assert w.take("world", 1) == (0, 1)
    assert w.held("world") == (1, 1)
    assert f.timers == []   # nothing held, nothing to give back


def test_seqs_idle_for_the_linger_go_back_and_the_window_starts_again():
    f = Fakes()
    w = f.windows(linger=0.02)
    for _ in range(4):   # reserves 1, 2, 4: seqs 0..6, takes 0..3
        w.take("world", 1)
    assert w.held("world") == (4, 7)
    assert len(f.timers) == 1 and abs(f.timers[0][0] - 0.02) < 1e-9
    f.run_timers()   # fires early: the window was used just now
    assert f.released == [] and len(f.timers) == 1
    f.now += 0.05
    f.run_timers()
    assert f.released == [("world", 1, 4, 7)]
    assert w.held("world") == (7, 7)
    assert f.timers == []
    f.reserved.clear()
    assert w.take("world", 1) == (7, 1)
    assert f.reserved == [("world", 1)]


def test_groups_have_windows_of_their_own():
    f = Fakes()
    w = f.windows()
    w.take("a", 1)
    w.take("a", 1)   # reserves 2: holds one
    w.take("b", 1)
    f.now += 1
    f.run_timers()
    assert f.released == [("a", 1, 2, 3)]


def test_a_window_of_a_generation_the_client_left_is_dropped_not_released():
    f = Fakes(generation=1)
    w = f.windows()
    for _ in range(2):
        w.take("world", 1)   # holds seq 2 of generation 1
    f.generation = 2
    f.reserved.clear()
    assert w.take("world", 2) == (3, 2)
    assert f.reserved == [("world", 1)]   # started again at one
    assert f.released == []


def test_the_generation_the_coordinator_answers_is_the_seqs_generation():
    f = Fakes(generation=5)
    w = f.windows()
    assert w.take("world", 4) == (0, 5)   # the client learns it was stale
    assert w.take("world", 5) == (1, 5)


def test_drop_gives_back_what_is_held_and_asks_the_coordinator_next():
    f = Fakes()
    w = f.windows()
    for _ in range(4):
        w.take("world", 1)
    w.drop("world")
    assert f.released == [("world", 1, 4, 7)]
    f.reserved.clear()
    assert w.take("world", 1) == (7, 1)
    assert f.reserved == [("world", 1)]


def test_release_all_gives_back_every_group():
    f = Fakes()
    w = f.windows()
    for group in ("a", "b"):
        for _ in range(2):
            w.take(group, 1)
    w.release_all()
    assert sorted(f.released) == [("a", 1, 2, 3), ("b", 1, 5, 6)]
    w.release_all()   # nothing left: nothing sent twice
    assert len(f.released) == 2


def test_a_coordinator_error_is_the_callers_and_changes_nothing():
    f = Fakes()
    w = f.windows()
    w.take("world", 1)

    def refuse(group, count):
        raise RuntimeError("coordinator unreachable")

    w._reserve = refuse
    with pytest.raises(RuntimeError):
        w.take("world", 1)
    assert w.held("world") == (1, 1)
    w._reserve = f.reserve
    assert w.take("world", 1) == (1, 1)
    assert f.reserved[-1] == ("world", 2)


def _shared_spec():
    root = os.environ.get("CCL_SOURCE_DIR") or pathlib.Path(
        __file__).resolve().parents[3]
    with open(os.path.join(root, "tests", "spec",
                           "sequence_windows.json")) as f:
        return json.load(f)


SPEC = _shared_spec()


@pytest.mark.parametrize("case", SPEC["cases"],
                         ids=[c["name"] for c in SPEC["cases"]])
def test_shared_spec(case):
    """The cases both clients run (tests/spec/sequence_windows.json; the
    C++ client runs them in tests/unit/sequence_windows_test.cc). The clock
    counts milliseconds: the policy only adds and compares times, so whole
    numbers keep a timer due exactly when the spec says."""
    now = [3_600_000]
    next_seq = {}
    reserved, released, timers = [], [], []
    order = itertools.count()

    def reserve(group, count):
        first = next_seq.get(group, 0)
        next_seq[group] = first + count
        reserved.append([group, first, count])
        return first, 1

    def release(group, generation, begin, end):
        released.append([group, begin, end])

    def schedule(delay, callback):
        timers.append((now[0] + delay, next(order), callback))

    w = SequenceWindows(reserve, release, schedule,
                        max_window=SPEC["max_window"],
                        linger=SPEC["linger_ms"], clock=lambda: now[0])
    for index, step in enumerate(case["steps"]):
        where = f"step {index}: {step}"
        reserved.clear()
        released.clear()
        seq = None
        if "take" in step:
            seq, generation = w.take(step["take"], 1)
            assert generation == 1, where
        elif "idle_ms" in step:
            # Due timers run in time order, each with the clock at its time.
            until = now[0] + step["idle_ms"]
            while True:
                due = [t for t in timers if t[0] <= until]
                if not due:
                    break
                timer = min(due, key=lambda t: t[:2])
                timers.remove(timer)
                now[0] = max(now[0], timer[0])
                timer[2]()
            now[0] = until
        elif "drop" in step:
            w.drop(step["drop"])
        elif "release_all" in step:
            w.release_all()
        else:
            pytest.fail(f"unknown {where}")
        if "seq" in step:
            assert seq == step["seq"], where
        assert reserved == step.get("reserved", []), where
        assert sorted(released) == sorted(step.get("released", [])), where
        for group, held in step.get("held", {}).items():
            assert list(w.held(group)) == held, f"{where}: {group}"
