#!/usr/bin/env python3
"""ccctl doctor against planted faults: is the planted rank, link or host
named first, and does a healthy cluster name nothing?

    doctor_faults.py [--workers 8] [--per-host 2] [--runs 20] [--seed S]
                     [--kinds healthy,veth,cpu,link,host] [--out DIR] [--svg]

Every worker sits in a network namespace of its own (hosts.py: veths on a
bridge), consecutive workers share a host id (--per-host), so the doctor
sees hosts of several ranks. Per run one fault is planted, chosen by the
seed among the workers, then `ccctl doctor -o json` runs from the clients'
namespace and the fault is removed:

  veth     one worker's veth rate-limited both ways (tc tbf on its end and
           on the bridge's end): that rank, slow with every peer.
  cpu      one worker's CPU capped (cgroup v1 cpu.cfs_quota_us): that rank.
  link     one pair of workers on different hosts: the traffic between the
           two rate-limited (an htb qdisc whose class for the other's
           address has the rate, on one worker's veth ends): that link.
  host     every worker of one host: their traffic to other hosts
           rate-limited (within the host untouched): that host.
  healthy  nothing planted: nothing may be named.

Prints a table (fault kind x runs x named first x false positives) and
writes every run's document to --out. Needs root (namespaces, tc, cgroups).
Exit 0 when every planted fault was named first and no healthy run named
anything.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as clustermod  # noqa: E402
import hosts as hostsmod  # noqa: E402

RATE = "400mbit"
CGROUP = "/sys/fs/cgroup/cpu"


def sh(*argv, check=True):
    r = subprocess.run(list(argv), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r


class Planter:
    """Plants and removes one fault at a time on a namespaced cluster."""

    def __init__(self, c, per_host):
        self.c = c
        self.hosts = c.hosts
        self.per_host = per_host
        self.undo = []

    def ns(self, i):
        return self.hosts.namespace(f"w{i}")

    def port(self, i):
        # hosts.py names the bridge's veth ends v<k> in the order nodes were
        # added: coord, client, then the workers.
        return f"v{i + 2}"

    def ip(self, i):
        return self.hosts.address(f"w{i}")

    def tc(self, ns, *args):
        sh("ip", "netns", "exec", ns, "tc", *args)

    def shape(self, i, peers):
        """Rate-limits worker i's traffic with `peers` (None: everyone), both
        ways: its own veth end shapes what it sends, the bridge's end what
        it receives."""
        for ns, dev, field in ((self.ns(i), "eth0", "dst"),
                               (self.hosts.hub, self.port(i), "src")):
            if peers is None:
                self.tc(ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                        RATE, "burst", "64kb", "latency", "200ms")
            else:
                # htb: the default class unshaped in effect, the filtered
                # one at RATE (this kernel has htb and u32, not prio).
                self.tc(ns, "qdisc", "add", "dev", dev, "root", "handle", "1:",
                        "htb", "default", "10", "r2q", "100000")
                self.tc(ns, "class", "add", "dev", dev, "parent", "1:",
                        "classid", "1:10", "htb", "rate", "20gbit")
                self.tc(ns, "class", "add", "dev", dev, "parent", "1:",
                        "classid", "1:20", "htb", "rate", RATE, "ceil", RATE)
                for p in peers:
                    self.tc(ns, "filter", "add", "dev", dev, "parent", "1:",
                            "protocol", "ip", "u32", "match", "ip", field,
                            f"{self.ip(p)}/32", "flowid", "1:20")
            self.undo.append(lambda ns=ns, dev=dev: sh(
                "ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev,
                "root", check=False))

    def cap_cpu(self, i):
        group = os.path.join(CGROUP, f"ccl-doctor-{os.getpid()}")
        os.makedirs(group, exist_ok=True)
        with open(os.path.join(group, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        # 3% of one CPU.
        with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
            f.write("3000")
        pid = self.c.workers[i].popen.pid
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(pid))

        def release():
            with open(os.path.join(CGROUP, "cgroup.procs"), "w") as f:
                f.write(str(pid))
            os.rmdir(group)
        self.undo.append(release)

    def host_of(self, i):
        return i // self.per_host

    def plant(self, kind, rng, n):
        """Plants `kind`; returns what the doctor should blame first."""
        if kind == "healthy":
            return None
        if kind in ("veth", "cpu"):
            i = rng.randrange(n)
            self.shape(i, None) if kind == "veth" else self.cap_cpu(i)
            return {"blame": "rank", "ranks": [i]}
        if kind == "link":
            a = rng.randrange(n)
            b = rng.choice([j for j in range(n)
                            if self.host_of(j) != self.host_of(a)])
            self.shape(a, [b])
            return {"blame": "link", "ranks": sorted([a, b])}
        if kind == "host":
            h = rng.randrange(n // self.per_host)
            members = [i for i in range(n) if self.host_of(i) == h]
            outside = [j for j in range(n) if self.host_of(j) != h]
            for i in members:
                self.shape(i, outside)
            return {"blame": "host", "host": f"h{h}", "ranks": members}
        raise ValueError(kind)

    def clear(self):
        while self.undo:
            self.undo.pop()()


def named(finding, want):
    if finding["blame"] != want["blame"]:
        return False
    if want["blame"] == "host":
        return finding.get("host") == want["host"]
    return sorted(finding["ranks"]) == want["ranks"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--per-host", type=int, default=2)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--kinds", default="healthy,veth,cpu,link,host")
    p.add_argument("--out", default=None)
    p.add_argument("--svg", action="store_true",
                   help="also write each run's heatmap beside its document")
    p.add_argument("--doctor-args",
                   default="--size 4M -n 10 -w 1 --latency-iters 200 "
                           "--skew-ops 10")
    a = p.parse_args()
    why = hostsmod.available()
    if why:
        print(f"doctor_faults: needs network namespaces ({why})")
        return 2
    kinds = a.kinds.split(",")
    if "cpu" in kinds and not os.path.exists(
            os.path.join(CGROUP, "cpu.cfs_quota_us")):
        print(f"doctor_faults: no cgroup v1 cpu controller at {CGROUP}: "
              f"the cpu fault is left out")
        kinds.remove("cpu")
    seed = a.seed if a.seed is not None else random.randrange(2**31)
    # Without --out the documents go to a temp dir, removed unless the run
    # failed (then its documents and logs say why).
    out = a.out or tempfile.mkdtemp(prefix="doctor_faults.")
    os.makedirs(out, exist_ok=True)
    print(f"doctor_faults: seed {seed}, {a.workers} workers, "
          f"{a.per_host} per host, documents in {out}", flush=True)
    rng = random.Random(seed)
    host_ids = [f"h{i // a.per_host}" for i in range(a.workers)]
    c = clustermod.Cluster(workers=a.workers, netns="on", out=out,
                           op_timeout=60.0, heartbeat_timeout_ms=10000,
                           seq_gap_timeout_ms=30000, host_ids=host_ids)
    planter = Planter(c, a.per_host)
    ccctl = clustermod.binary("ccctl")
    table = []
    failed = False
    try:
        for kind in kinds:
            first = wrong = 0
            times = []
            for run in range(a.runs):
                want = planter.plant(kind, rng, a.workers)
                start = time.monotonic()
                svg = (["--svg", os.path.join(out, f"{kind}-{run}.svg")]
                       if a.svg else [])
                try:
                    r = subprocess.run(
                        [ccctl, "--coordinator", c.coord_address,
                         "--timeout", "120s", "doctor", "-q", "-o", "json",
                         *a.doctor_args.split(), *svg],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True, timeout=600)
                finally:
                    planter.clear()
                times.append(time.monotonic() - start)
                path = os.path.join(out, f"{kind}-{run}.json")
                with open(path, "w") as f:
                    f.write(r.stdout)
                if r.returncode not in (0, 3):
                    print(f"{kind} run {run}: ccctl exit {r.returncode}: "
                          f"{r.stderr.strip()}", flush=True)
                    failed = True
                    continue
                findings = json.loads(r.stdout)["findings"]
                if want is None:
                    wrong += bool(findings)
                    ok = not findings
                else:
                    ok = bool(findings) and named(findings[0], want)
                    first += ok
                    # Anything named beside the planted fault.
                    wrong += sum(1 for f in findings[1:]
                                 if not named(f, want))
                if not ok:
                    failed = True
                    print(f"{kind} run {run}: want {want}, got "
                          f"{[(f['blame'], f['ranks'], f['evidence']) for f in findings]}",
                          flush=True)
            times.sort()
            table.append((kind, a.runs, "-" if kind == "healthy" else first,
                          wrong, times[len(times) // 2]))
            print(f"{kind}: done", flush=True)
    finally:
        planter.clear()
        c.stop()
    print(f"\n{'fault':8} {'runs':>5} {'named first':>12} "
          f"{'other findings':>15} {'median s':>9}")
    for kind, runs, first, wrong, t in table:
        print(f"{kind:8} {runs:5} {first!s:>12} {wrong:15} {t:9.1f}")
    if failed:
        print(f"doctor_faults: documents and logs kept in {out}")
        return 1
    if not a.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
