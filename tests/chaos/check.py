"""Checks a chaos run's recorded history against the model.

    check.py DIR            (chaos.py calls check() itself)

The rules, each a violation when broken:

  wrong value      a read returned values the model says no rank could
                   hold: what the successful ops before it computed, and
                   for elements no op wrote, the bytes last written (so a
                   tensor an op did not involve, or did not write, must
                   have kept them, failed ops included)
  bad code         an op failed with a code outside UNAVAILABLE,
                   DEADLINE_EXCEEDED, ABORTED, FAILED_PRECONDITION,
                   CANCELLED; or with NOT_FOUND for a tensor whose rank was
                   never replaced since the tensor was made
  too slow         an op (success or failure) took longer than its
                   deadline plus the bound; an async op still running past
                   its deadline plus the bound
  client deadline  the client's own RPC deadline ran out on a rank that was
                   not stopped at the time (a worker that never answered)
  unexplained      an op failed while no fault was in progress: outside
                   every window [fault injected, world recovered + grace]
  daemon died      a coordinator or worker exited without the injector
                   asking (its log tail is in the report)
  no recovery      the world did not recover within the limit after a fault
  wrong probe      the injector's own all_reduce returned a wrong sum
  memory           a daemon's RSS grew --rss-limit or more after the warm-up
                   (--rss-after), or the coordinator kept the KV of more than
                   two generations

A subgroup dropped by a re-form (NOT_FOUND "no group named") is a bad code:
workers make every subgroup again when the world re-forms, a restarted one
included. --allow-dropped-groups only counts them (for a build without that).
"""

import glob
import json
import os
import statistics
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import history  # noqa: E402
import model  # noqa: E402

ALLOWED = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED",
           "FAILED_PRECONDITION", "CANCELLED"}
# Over an op's own deadline: the Python client's RPC margin (5 s, after
# which it gives up on a rank) and scheduling slack on a loaded machine.
BOUND_S = 7.0
# After a fault's recovery, ops that were already waiting behind it may
# still fail for this long.
GRACE_S = 3.0


class Checker:
    def __init__(self, out, args=None, deaths=()):
        self.out = out
        self.args = args
        self.strict_groups = not (args and getattr(args, "allow_dropped_groups",
                                                  False))
        self.violations = []
        self.stats = {"ops": 0, "ops_ok": 0, "ops_failed": 0,
                      "reads_checked": 0, "elements_checked": 0,
                      "by_kind": {}, "failed_by_code": {},
                      "groups_dropped": 0, "clients": 0,
                      "clients_killed": 0, "unfinished_ops": 0}
        self.daemon_events = history.read(os.path.join(out, "daemons.jsonl"))
        self.fault_events = history.read(os.path.join(out, "faults.jsonl"))
        self.world = history.read(os.path.join(out, "world.jsonl"))
        self.deaths = list(deaths)
        self.kills = {}     # proc -> [t] of SIGKILLs sent
        self.stops = {}     # proc -> [(t_stop, t_cont)]
        open_stop = {}
        for ev in self.daemon_events:
            if ev["ev"] != "signal":
                continue
            if ev["sig"] == 9:
                self.kills.setdefault(ev["proc"], []).append(ev["t"])
                if ev["proc"] in open_stop:
                    self.stops.setdefault(ev["proc"], []).append(
                        (open_stop.pop(ev["proc"]), ev["t"]))
            elif ev["sig"] == 19:
                open_stop[ev["proc"]] = ev["t"]
            elif ev["sig"] == 18 and ev["proc"] in open_stop:
                self.stops.setdefault(ev["proc"], []).append(
                    (open_stop.pop(ev["proc"]), ev["t"]))
        for proc, t in open_stop.items():
            self.stops.setdefault(proc, []).append((t, float("inf")))
        self.windows = []
        self.faults = [e for e in self.fault_events if e["ev"] == "fault"]
        for f in self.faults:
            self.windows.append((f["t_start"] - 0.5,
                                 f["t_recovered"] + GRACE_S, f))

    def violation(self, kind, text, **detail):
        self.violations.append({"kind": kind, "text": text, **detail})

    # -- helpers -------------------------------------------------------------

    def in_window(self, t0, t1):
        return any(t0 <= hi and t1 >= lo for lo, hi, _ in self.windows)

    def killed_between(self, rank, t0, t1):
        return any(t0 <= t <= t1 for t in self.kills.get(f"w{rank}", []))

    def stopped_during(self, rank, t0, t1):
        return any(a <= t1 and b >= t0
                   for a, b in self.stops.get(f"w{rank}", []))

    def generation_changed(self, t0, t1):
        gens = set()
        last = None
        for w in self.world:
            if w["t"] <= t0:
                last = w["gen"]
            elif w["t"] <= t1:
                gens.add(w["gen"])
        gens.add(last)
        gens.discard(None)
        return len(gens) > 1

    # -- one client's history ------------------------------------------------

    def check_client(self, path):
        records = history.read(path)
        if not records:
            return
        self.stats["clients"] += 1
        cid = records[0].get("c")
        ends = {r["i"]: r for r in records if r.get("ev") == "end"}
        submitted = {r["i"]: r for r in records if r.get("ev") == "submitted"}
        finished = any(r.get("ev") == "done" for r in records)
        if not finished:
            self.stats["clients_killed"] += 1
        cells = {}
        made = {}           # (name, rank) -> alloc t0
        groups = {}         # name -> creation t1
        # Async ops are applied to the model when their wait ended (the
        # client touches their tensors only after that).
        order = []
        for r in records:
            if r.get("ev") == "begin":
                e = ends.get(r["i"])
                if e is None:
                    self.stats["unfinished_ops"] += 1
                    continue
                key = e["t1"] if r.get("is_async") else r["t0"]
                order.append((key, r["i"], r, e))
        order.sort(key=lambda x: (x[0], x[1]))
        for _, _, b, e in order:
            kind = b["kind"]
            self.stats["ops"] += 1
            self.stats["by_kind"][kind if kind != "op" else b["op"]["kind"]] \
                = self.stats["by_kind"].get(
                    kind if kind != "op" else b["op"]["kind"], 0) + 1
            if e["ok"]:
                self.stats["ops_ok"] += 1
            else:
                self.stats["ops_failed"] += 1
            where = f"client {cid} op {b['i']} ({self.describe(b)})"
            self.check_outcome(b, e, where, made, groups)
            if kind == "alloc":
                if e["ok"]:
                    for rank in b["ranks"]:
                        vals = model.fill_values(b["dtype"], b["numel"],
                                                 b["fill"], rank,
                                                 **b["params"])
                        cells[(b["name"], rank)] = (
                            model.unknown_cell(b["dtype"], b["numel"])
                            if vals is None else
                            model.Cell(vals.copy(),
                                       np.ones(b["numel"], bool)))
                        made[(b["name"], rank)] = b["t0"]
            elif kind == "free":
                for rank in b["ranks"]:
                    cells.pop((b["name"], rank), None)
            elif kind == "write":
                errs = e.get("errs", {})
                for rank_s, doc in b["values"].items():
                    key = (b["name"], int(rank_s))
                    if key not in cells:
                        continue
                    if rank_s in errs:
                        cells[key].known[:] = False
                    else:
                        vals = model.decode(doc)
                        cells[key] = model.Cell(
                            vals.astype(cells[key].values.dtype),
                            np.ones(vals.size, bool))
            elif kind == "read":
                for rank_s, doc in e.get("got", {}).items():
                    key = (b["name"], int(rank_s))
                    if key not in cells:
                        continue
                    got = self.values_of(doc)
                    diff = model.compare(b["dtype"], cells[key], got)
                    self.stats["reads_checked"] += 1
                    self.stats["elements_checked"] += int(
                        cells[key].known.sum())
                    if diff:
                        self.violation(
                            "wrong value",
                            f"{where}: tensor {b['name']} on rank {rank_s} "
                            f"({b['dtype']}): index, expected, got: {diff}",
                            client=cid, op=b["i"])
                        # Report once, then follow what the worker holds.
                        cells[key].values[:] = got.astype(
                            cells[key].values.dtype)
            elif kind == "op":
                op = b["op"]
                if op["kind"] == "barrier":
                    continue
                present = {k: v for k, v in cells.items()
                           if k[0] in (op.get("input"), op.get("output"),
                                       op.get("recv_tensor"))}
                needed = model.tensors_of(op)
                if any(k not in present for k in needed):
                    # A tensor the client had already lost (its rank was
                    # replaced): nothing left to model.
                    continue
                model.apply(op, present, e["ok"])
            elif kind == "new_group":
                if e["ok"]:
                    groups[b["group"]] = e["t1"]

    @staticmethod
    def values_of(doc):
        if "z" in doc:
            return np.frombuffer(zlib.decompress(bytes.fromhex(doc["z"])),
                                 np.dtype(doc["dt"]))
        return model.decode(doc)

    @staticmethod
    def describe(b):
        if b["kind"] == "op":
            op = b["op"]
            extra = f" {op['reduce']}" if op.get("reduce") else ""
            inplace = " in place" if not op.get("output") else ""
            return (f"{op['kind']}{extra} {op['dtype']} group {op['group']}"
                    f"{inplace}{' async' if b.get('is_async') else ''}")
        return f"{b['kind']} {b.get('name', b.get('group', ''))}"

    def check_outcome(self, b, e, where, made, groups):
        t0, t1 = b["t0"], e["t1"]
        timeout = b.get("timeout") or (self.args.op_timeout if self.args
                                       else 3.0)
        took = t1 - t0
        is_async = b.get("is_async")
        if b["kind"] in ("op", "new_group") and not is_async:
            if took > timeout + BOUND_S:
                self.violation("too slow",
                               f"{where}: took {took:.1f} s with a deadline "
                               f"of {timeout:.1f} s "
                               f"({'ok' if e['ok'] else 'failed'})",
                               client=b["c"], op=b["i"])
        if is_async and not e["ok"] and e.get("still_running"):
            self.violation("too slow",
                           f"{where}: async op still running {took:.1f} s "
                           f"after submission (deadline {timeout:.1f} s)",
                           client=b["c"], op=b["i"])
        if e["ok"]:
            return
        # Failures a fault explains whenever they happen (a replaced rank
        # lost what it held); the others must fall inside a fault's window.
        unexplained = []
        refused = []
        refusals_explained = False
        for key, (code, details) in e.get("errs", {}).items():
            self.stats["failed_by_code"][code] = \
                self.stats["failed_by_code"].get(code, 0) + 1
            rank = None if key == "c" else int(key)
            if code == "NOT_FOUND":
                if self.not_found(b, e, where, rank, key, details, made):
                    refusals_explained = True
                continue
            if code == "FAILED_PRECONDITION" and " was refused at rank" in \
                    details:
                # The ranks that accepted an op another rank refused: as
                # explained as that refusal (below, once all are seen).
                refused.append((key, code, details))
                continue
            unexplained.append((key, code, details))
            if code not in ALLOWED:
                self.violation("bad code", f"{where}: {code} on rank {key}: "
                               f"{details}", client=b["c"], op=b["i"])
                continue
            if (code == "DEADLINE_EXCEEDED" and details == "Deadline Exceeded"
                    and rank is not None
                    and not self.stopped_during(rank, t0, t1)):
                self.violation("client deadline",
                               f"{where}: rank {rank} never answered within "
                               f"the RPC deadline and was not stopped",
                               client=b["c"], op=b["i"])
        if not refusals_explained:
            unexplained.extend(refused)
        if unexplained and not self.in_window(t0, t1):
            self.violation("unexplained",
                           f"{where}: failed at {t1:.2f} with no fault in "
                           f"progress: {json.dumps(unexplained)[:600]}",
                           client=b["c"], op=b["i"])

    def not_found(self, b, e, where, rank, key, details, made):
        """A violation unless a fault explains the NOT_FOUND; True if one
        does (a replaced rank lost the tensor or the work)."""
        t0, t1 = b["t0"], e["t1"]
        if "no group named" in details:
            # A subgroup a re-form dropped.
            self.stats["groups_dropped"] += 1
            if self.strict_groups:
                self.violation("bad code", f"{where}: subgroup dropped: "
                               f"{details}", client=b["c"], op=b["i"])
            return
        if "no async work with id" in details:
            # Waited for on a worker that was replaced since the submit.
            if rank is not None and self.killed_between(rank, t0, t1):
                return True
        elif "no tensor named" in details:
            # A free after a failed alloc, or of a tensor a replaced rank
            # lost, may find nothing on some ranks; otherwise the tensor's
            # rank must have been replaced since it was made there.
            if b["kind"] == "free" and b.get("why") in ("alloc_failed",
                                                        "lost"):
                return True
            if rank is not None and any(
                    self.killed_between(rank, t, t1)
                    for (name, r), t in made.items()
                    if r == rank and f"'{name}'" in details):
                return True
        self.violation("bad code", f"{where}: NOT_FOUND on rank {key} "
                       f"without its worker being replaced: {details}",
                       client=b["c"], op=b["i"])

    # -- the whole run ---------------------------------------------------------

    def run(self):
        for path in sorted(glob.glob(os.path.join(self.out,
                                                  "client-*.jsonl"))):
            self.check_client(path)
        for d in self.deaths:
            if d["proc"].startswith("c"):
                self.violation("client died",
                               f"client {d['proc']} exited {d['rc']} "
                               f"unasked:\n{d['log'][-3000:]}")
            else:
                self.violation("daemon died",
                               f"{d['proc']} exited {d['rc']} unasked; log "
                               f"tail:\n{d['log'][-3000:]}")
        self.check_memory()
        self.check_doctor()
        for e in self.fault_events:
            if e["ev"] == "no_recovery":
                self.violation("no recovery",
                               f"world not recovered: {e['last']}")
            elif e["ev"] == "wrong_probe":
                self.violation("wrong probe", e["error"])
            elif e["ev"] == "client_hung":
                self.violation("client hung",
                               f"{e['proc']} did not drain in 120 s")
        return self.report()

    def check_doctor(self):
        """Each "slow" fault: the doctor, run while one rank was throttled,
        named that rank first."""
        self.doctor = {"slow_faults": 0, "named_first": 0}
        for f in self.faults:
            if f["kind"] != "slow":
                continue
            self.doctor["slow_faults"] += 1
            verdict = f.get("doctor") or {}
            first = verdict.get("first") or {}
            if first.get("blame") == "rank" and first.get("ranks") == [
                    f["rank"]]:
                self.doctor["named_first"] += 1
                continue
            said = (f"{first['blame']} {first['ranks']} first "
                    f"({first.get('evidence', '')})" if first else
                    verdict.get("error") or
                    f"nothing (exit {verdict.get('exit')})")
            self.violation("doctor missed",
                           f"rank {f['rank']} ({f['target']}) throttled at "
                           f"{f['t_start']:.2f}: ccctl doctor named {said}")

    def check_memory(self):
        """With --rss-after: each daemon's RSS (one process, not across
        restarts) may grow less than --rss-limit between the first and the
        last fifth of the samples taken after the warm-up (medians: a large
        tensor alive at one sample is noise, growth is a trend); a worker's
        RSS is taken less the tensors it held then. Always: the
        coordinator keeps the KV of at most two generations (the current
        one and the one it replaced)."""
        self.rss_growth = {}
        self.kv_summary = {}
        kv = self.load("kv.json", [])
        if kv:
            gens = [k.get("ccl_coordinator_kv_generations", 0) for k in kv]
            kb = [k.get("ccl_coordinator_kv_bytes", 0) for k in kv]
            self.kv_summary = {"samples": len(kv), "max_generations": max(gens),
                               "max_bytes": max(kb), "last_bytes": kb[-1],
                               "generations_seen": len({k.get("gen")
                                                        for k in kv})}
            if max(gens) > 2:
                self.violation("memory", f"the coordinator held the KV of "
                               f"{max(gens):.0f} generations at once")
        a = self.args
        if a is None or getattr(a, "rss_after", None) is None:
            return
        # Each incarnation warms up from its own start: a worker restarted
        # after a kill fills its communicators' buffers again.
        starts = {f"{e['proc']}.{e['incarnation']}": e["t"]
                  for e in self.daemon_events if e["ev"] == "start"}
        raw = self.load("rss.json", {})
        # Workers are judged on RSS less the tensors they held at each sample
        # (rss_net.json, where the run recorded it): the tensors clients keep
        # in flight are theirs, not the daemon's growth.
        net = self.load("rss_net.json", {})
        for name, samples in sorted(raw.items()):
            less_tensors = net.get(name)
            warm = starts.get(name, samples[0][0] if samples else 0)
            warm += a.rss_after
            growth = self.growth_after(less_tensors or samples, warm)
            if growth is None:
                continue
            entry = {**growth,
                     "measure": "rss-tensors" if less_tensors else "rss"}
            if less_tensors:
                raw_growth = self.growth_after(samples, warm)
                if raw_growth is not None:
                    entry["raw_growth"] = raw_growth["growth"]
            self.rss_growth[name] = entry
            if growth["growth"] >= a.rss_limit:
                self.violation(
                    "memory", f"{name}: {entry['measure']} grew "
                    f"{growth['growth']:.1%} after the warm-up "
                    f"({growth['warm_kib']:.0f} -> {growth['last_kib']:.0f} "
                    f"KiB)")

    @staticmethod
    def growth_after(samples, warm):
        """Growth between the medians of the first and the last fifth of the
        samples taken at or after `warm`; None with fewer than 10."""
        post = [k for t, k in samples if t >= warm]
        if len(post) < 10:
            return None
        n = max(2, len(post) // 5)
        base = statistics.median(post[:n])
        last = statistics.median(post[-n:])
        return {"warm_kib": base, "last_kib": last,
                "growth": last / base - 1, "samples": len(post)}

    def load(self, name, default):
        path = os.path.join(self.out, name)
        if not os.path.exists(path):
            return default
        with open(path) as f:
            return json.load(f)

    def report(self):
        rec = [f["recovery_s"] for f in self.faults
               if f.get("recovery_s") is not None]
        by_kind = {}
        for f in self.faults:
            by_kind[f["kind"]] = by_kind.get(f["kind"], 0) + 1
        rec_by_kind = {}
        for f in self.faults:
            if f.get("recovery_s") is not None:
                rec_by_kind.setdefault(f["kind"], []).append(f["recovery_s"])
        rss = {}
        path = os.path.join(self.out, "rss.json")
        if os.path.exists(path):
            with open(path) as f:
                rss = json.load(f)
        end = [e for e in self.fault_events if e["ev"] in ("end",
                                                           "traffic_end")]
        start = [e for e in self.daemon_events if e["ev"] == "start"]
        wall = (end[0]["t"] - start[0]["t"]) if end and start else None
        kinds = {}
        for v in self.violations:
            kinds[v["kind"]] = kinds.get(v["kind"], 0) + 1
        gens = [w["gen"] for w in self.world if w.get("gen") is not None]
        return {
            "ok": not self.violations,
            "seed": getattr(self.args, "seed", None),
            "wall_s": wall,
            "stats": self.stats,
            "faults": len(self.faults),
            "faults_by_kind": by_kind,
            "recovery_s": {
                "median": statistics.median(rec) if rec else None,
                "max": max(rec) if rec else None,
                "by_kind": {k: {"n": len(v),
                                "median": statistics.median(v),
                                "max": max(v)}
                            for k, v in sorted(rec_by_kind.items())}},
            "generations": [min(gens), max(gens)] if gens else None,
            "wrong_values": kinds.get("wrong value", 0),
            "daemons_died_unasked": kinds.get("daemon died", 0),
            "violations_by_kind": kinds,
            "doctor": getattr(self, "doctor", None),
            "violations": self.violations[:200],
            "rss": summarize_rss(rss),
            "rss_growth": getattr(self, "rss_growth", {}),
            "coordinator_kv": getattr(self, "kv_summary", {}),
        }


def summarize_rss(rss):
    out = {}
    for name, samples in rss.items():
        if len(samples) < 2:
            continue
        out[name] = {"first_kib": samples[0][1], "last_kib": samples[-1][1],
                     "max_kib": max(k for _, k in samples),
                     "samples": len(samples),
                     "span_s": samples[-1][0] - samples[0][0]}
    return out


def check(out, args=None, deaths=()):
    return Checker(out, args, deaths).run()


def render(report):
    s = report["stats"]
    lines = [
        f"chaos: {'PASSED' if report['ok'] else 'FAILED'}: "
        f"{s['ops']} ops ({s['ops_ok']} ok, {s['ops_failed']} failed) from "
        f"{s['clients']} clients ({s['clients_killed']} killed), "
        f"{s['reads_checked']} reads checked "
        f"({s['elements_checked']} elements)",
        f"chaos: faults {report['faults']} "
        f"{json.dumps(report['faults_by_kind'])}; recovery median "
        f"{fmt(report['recovery_s']['median'])} s, max "
        f"{fmt(report['recovery_s']['max'])} s; generations "
        f"{report['generations']}",
        f"chaos: wrong values {report['wrong_values']}, daemons died unasked "
        f"{report['daemons_died_unasked']}, subgroups dropped by re-forms "
        f"{s['groups_dropped']}; failures by code "
        f"{json.dumps(s['failed_by_code'])}",
    ]
    if report.get("doctor") and report["doctor"]["slow_faults"]:
        d = report["doctor"]
        lines.append(f"chaos: ccctl doctor named the throttled rank first in "
                     f"{d['named_first']} of {d['slow_faults']} slow faults")
    if report.get("rss_growth"):
        lines.append("chaos: RSS after warm-up: " + ", ".join(
            f"{k} {v['growth']:+.1%}"
            + (f" (less tensors; RSS itself {v['raw_growth']:+.1%})"
               if "raw_growth" in v else "")
            for k, v in report["rss_growth"].items()))
    if report.get("coordinator_kv"):
        kv = report["coordinator_kv"]
        lines.append(f"chaos: coordinator KV: at most "
                     f"{kv['max_generations']:.0f} generations, "
                     f"{kv['max_bytes']:.0f} bytes at most, "
                     f"{kv['last_bytes']:.0f} at the end "
                     f"({kv['generations_seen']} generations seen)")
    for v in report["violations"][:25]:
        lines.append(f"  [{v['kind']}] {v['text']}")
    if len(report["violations"]) > 25:
        lines.append(f"  ... and {len(report['violations']) - 25} more")
    return "\n".join(lines)


def fmt(x):
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    print(render(check(sys.argv[1])))
