#!/usr/bin/python3
"""The chaos run: random faults under random traffic, and a history that
has to check out.

    chaos.py --seed 7 --duration 120 [--workers 4] [--clients 3]
             [--faults kill,stop,coord,client,partition] [--netns auto]
             [--out DIR] [--report FILE]

A coordinator and N CPU workers (each in a network namespace of its own
with --netns on; on 127.0.0.1 with --netns off), K client processes
(workload.py) issuing random ops and recording every request and outcome,
and a fault injector that, under that traffic, picks one fault at a time at
random:

  kill       kill -9 of a worker, restarted (same rank) after a random delay
  stop       SIGSTOP of a worker for a random time, then SIGCONT
  coord      kill -9 of the coordinator, restarted on the same address
  client     kill -9 of a client process mid-op; a new client takes over
  partition  the link between two workers cut (iptables DROP or REJECT in
             their namespaces) for a random time, then restored
             (needs --netns on)
  recv       a client's recv with no send (the tutorial's mistake): it times
             out and the world re-forms, no process restarting
  slow       one worker throttled (stopped 22 ms of every 24) while
             `ccctl doctor` runs beside the traffic; the checker asserts
             that the doctor named that rank first

After each fault it waits for the world to recover (complete, every worker
ready in one generation, and a probe all_reduce correct) and records how
long that took. At the end the clients drain (async ops waited, every
tensor read a last time) and check.py checks the recorded history against
the model. The verdict, the figures and, on failure, the seed and the
command that replays it are printed; the exit status is 0 only when the
history checks out.

Everything random comes from --seed: the fault schedule, the clients'
seeds and therefore their op sequences. The interleaving with the
machine's timing is not: a replay makes the same choices, and a timing
bug it found may need a few replays (--repeat) to show again.
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The driver starts daemons and clients (fork, then exec) while its own gRPC
# channels are busy. grpcio's fork support makes every fork wait for gRPC's
# thread pool to go idle first, which a busy pool may never do: the driver
# then hangs, logging "Waiting for thread pool to idle before forking" every
# 3 s until ctest kills it (chaos_seeded_test, once in a loaded run). Every
# child here execs at once and none uses this process's gRPC state, so the
# support is not needed; it must be off before grpc is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import history  # noqa: E402
import procs  # noqa: E402
from cluster import Cluster, binary, scrape  # noqa: E402

KV_GAUGES = ("ccl_coordinator_kv_generations", "ccl_coordinator_kv_keys",
             "ccl_coordinator_kv_bytes")

FAULTS = ("kill", "stop", "coord", "client", "partition", "recv", "slow")

# The doctor of a "slow" fault: small sizes, so that it ends in seconds
# beside the traffic, and no skew (a throttled rank is slow in the pairs).
DOCTOR_ARGS = ["--size", "1M", "-n", "5", "-w", "1", "--latency-iters", "50",
               "--skew-ops", "0", "--budget", "60s", "-q"]


class Run:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.out = args.out
        os.makedirs(self.out, exist_ok=True)
        self.events = history.Writer(os.path.join(self.out, "daemons.jsonl"))
        self.faults = history.Writer(os.path.join(self.out, "faults.jsonl"))
        self.world_log = history.Writer(os.path.join(self.out,
                                                     "world.jsonl"))
        self.cluster = None
        self.hosts = None
        self.coord = None
        self.workers = []
        self.clients = {}      # id -> Proc
        self.killed_clients = {}  # id -> when the injector killed it
        self.client_serial = 0
        self.stop_monitor = threading.Event()
        self.monitor_thread = None
        self.rss = {}          # proc name -> [(t, kib)]
        # Workers only: RSS less the bytes of the tensors the worker holds
        # (as its last heartbeat told the coordinator, at most a beat old), so
        # that the RSS rule judges the daemon's own memory, not how many
        # large tensors the clients keep in flight.
        self.rss_net = {}      # proc name -> [(t, kib)]
        self.kv = []           # the coordinator's KV gauges over time
        self.probe_client = None
        self.probe_serial = 0
        self.coord_address = None

    # -- setup -------------------------------------------------------------

    def setup(self):
        a = self.args
        self.cluster = Cluster(
            workers=a.workers, netns=a.netns, out=self.out,
            events=self.events, op_timeout=a.op_timeout,
            heartbeat_interval_ms=a.heartbeat_interval_ms,
            heartbeat_timeout_ms=a.heartbeat_timeout_ms,
            seq_gap_timeout_ms=a.seq_gap_timeout_ms, device=a.device)
        c = self.cluster
        self.netns, self.hosts = c.netns, c.hosts
        self.coord, self.workers = c.coord, c.workers
        self.coord_address = c.coord_address
        self.probe_client, self.ccl = c.client, c.ccl
        if "client" in a.faults and a.clients == 0:
            a.faults = [f for f in a.faults if f != "client"]
        if "partition" in a.faults and not self.netns:
            print("chaos: partitions need --netns on; left out")
            a.faults = [f for f in a.faults if f != "partition"]
        self.monitor_thread = threading.Thread(target=self.monitor,
                                               daemon=True)
        self.monitor_thread.start()

    def start_client(self):
        self.client_serial += 1
        cid = f"c{self.client_serial}"
        seed = self.rng.randrange(1 << 31)
        p = procs.Proc(
            cid,
            [sys.executable, os.path.join(HERE, "workload.py"),
             "--coordinator", self.coord_address, "--id", cid,
             "--seed", str(seed), "--out", self.out,
             "--world-size", str(self.args.workers),
             "--op-timeout", str(self.args.op_timeout),
             *(["--settle"] if self.args.settle else [])],
            self.out, self.events, port_file=False,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            prefix=self.hosts.exec_prefix("client") if self.netns else ())
        p.start()
        self.clients[cid] = p
        return cid

    # -- watching ----------------------------------------------------------

    def monitor(self):
        from ccl.v1 import coordinator_pb2, coordinator_pb2_grpc
        import grpc
        channel = grpc.insecure_channel(self.coord_address)
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        last = None
        next_rss = 0.0
        while not self.stop_monitor.is_set():
            for p in [self.coord, *self.workers, *self.clients.values()]:
                p.check()
            members = {}
            try:
                w = stub.GetWorld(coordinator_pb2.GetWorldRequest(),
                                  timeout=1.0)
                now = (w.generation, coordinator_pb2.WorldState.Name(w.state))
                members = {m.rank: m.tensor_bytes / 1024 for m in w.members}
            except grpc.RpcError as e:
                now = (None, e.code().name)
            if now != last:
                self.world_log.write({"t": history.now(), "gen": now[0],
                                      "state": now[1]})
                last = now
            if history.now() >= next_rss:
                next_rss = history.now() + 2.0
                try:
                    kv = scrape(self.cluster.metrics, KV_GAUGES)
                    kv["t"] = history.now()
                    kv["gen"] = now[0]
                    self.kv.append(kv)
                except OSError:
                    pass  # the coordinator is down for a moment
                for p in [self.coord, *self.workers]:
                    held = (members.get(self.workers.index(p))
                            if p is not self.coord else None)
                    kib = p.rss()
                    if kib is None:
                        continue
                    name = f"{p.name}.{p.incarnation}"
                    self.rss.setdefault(name, []).append((history.now(), kib))
                    if held is not None:
                        self.rss_net.setdefault(name, []).append(
                            (history.now(), kib - held))
            time.sleep(0.2)
        channel.close()

    # -- recovery ----------------------------------------------------------

    def probe(self):
        """One all_reduce on a fresh tensor, checked; raises on failure."""
        c = self.probe_client
        self.probe_serial += 1
        name = f"chaos.probe.{self.probe_serial}"
        t = c.tensor((4,), "int64", "rank+1", name=name)
        try:
            c.all_reduce(t, op="sum", timeout=self.args.op_timeout)
            want = self.args.workers * (self.args.workers + 1) // 2
            for r, got in t.read().items():
                if list(got) != [want] * 4:
                    raise AssertionError(f"probe on rank {r}: {list(got)}, "
                                         f"not [{want}] * 4")
        finally:
            try:
                t.free()
            except self.ccl.CclError:
                pass

    def wait_recovered(self, since, limit):
        """Seconds from `since` until the world is whole and a probe
        all_reduce is correct; None if that did not happen within
        `limit` s."""
        c = self.probe_client
        deadline = history.now() + limit
        last = ""
        while history.now() < deadline:
            try:
                c.wait_ready(max(1.0, deadline - history.now()))
                self.probe()
                return history.now() - since
            except self.ccl.CclError as e:
                last = str(e).splitlines()[0]
            except AssertionError as e:
                # A wrong probe result is a wrong result, not a slow
                # recovery.
                self.faults.write({"ev": "wrong_probe", "t": history.now(),
                                   "error": str(e)})
                last = str(e)
            time.sleep(0.1)
        self.faults.write({"ev": "no_recovery", "t": history.now(),
                           "last": last})
        return None

    # -- faults ------------------------------------------------------------

    def inject(self, kind):
        a = self.args
        rec = {"ev": "fault", "kind": kind, "t_start": history.now()}
        if kind == "kill":
            w = self.rng.choice(self.workers)
            delay = self.rng.uniform(0, 2.0)
            rec.update(target=w.name, delay=delay)
            w.kill("injected kill")
            time.sleep(delay)
            w.start()
        elif kind == "stop":
            w = self.rng.choice(self.workers)
            hold = self.rng.uniform(0.3, 2.0 * a.heartbeat_timeout_ms / 1000)
            rec.update(target=w.name, hold=hold)
            w.signal(signal.SIGSTOP, "injected stop")
            time.sleep(hold)
            w.signal(signal.SIGCONT, "injected stop ends")
        elif kind == "coord":
            delay = self.rng.uniform(0.1, 2.0)
            rec.update(target="coord", delay=delay)
            self.coord.kill("injected kill")
            time.sleep(delay)
            self.coord.start()
            self.coord.wait_port()
        elif kind == "client":
            # One of the clients running now: a dead one picked again would
            # cost nothing to kill and still get a replacement, so the
            # number of clients would grow with every such pick.
            cid = self.rng.choice(sorted(c for c, p in self.clients.items()
                                         if p.alive()))
            # Somewhere inside an op: clients are busy all the time.
            time.sleep(self.rng.uniform(0, 0.5))
            rec.update(target=cid)
            self.clients[cid].kill("injected kill")
            self.killed_clients[cid] = history.now()
            rec["replacement"] = self.start_client()
        elif kind == "recv":
            # A client's unmatched recv (the tutorial's mistake): it times
            # out, breaks the communicator, and the world re-forms without
            # any process restarting.
            c = self.probe_client
            src, dst = self.rng.sample(range(len(self.workers)), 2)
            rec.update(target=f"w{dst}<-w{src}")
            t = c.tensor((4,), "float32", "zeros", ranks=[dst],
                         name=f"chaos.recv.{self.probe_serial}")
            self.probe_serial += 1
            try:
                c.recv(t, src, dst=dst, timeout=1.0)
            except self.ccl.CclError as e:
                rec["error"] = e.code.name
            try:
                t.free()
            except self.ccl.CclError:
                pass
        elif kind == "slow":
            i = self.rng.randrange(len(self.workers))
            rec.update(target=self.workers[i].name, rank=i)
            rec["doctor"] = self.doctor_while_throttled(self.workers[i])
        elif kind == "partition":
            a_, b_ = self.rng.sample(range(len(self.workers)), 2)
            mode = self.rng.choice(["drop", "reject"])
            hold = self.rng.uniform(1.0, 6.0)
            rec.update(target=f"w{a_}-w{b_}", mode=mode, hold=hold)
            self.hosts.cut(f"w{a_}", f"w{b_}", mode)
            time.sleep(hold)
            self.hosts.restore(f"w{a_}", f"w{b_}", mode)
        rec["t_end"] = history.now()
        took = self.wait_recovered(rec["t_end"], a.recovery_limit)
        rec["t_recovered"] = history.now()
        rec["recovery_s"] = took
        self.faults.write(rec)
        doctor = ""
        if "doctor" in rec:
            first = rec["doctor"].get("first")
            doctor = (f"doctor named {first['blame']} {first['ranks']} "
                      f"first; " if first else
                      f"doctor named nothing "
                      f"({rec['doctor'].get('error', 'exit %s' % rec['doctor']['exit'])}); ")
        print(f"chaos: {kind} {rec.get('target', '')}: {doctor}"
              + (f"recovered in {took:.2f} s" if took is not None
                 else "NOT recovered"), flush=True)
        return took is not None

    def doctor_while_throttled(self, worker):
        """`ccctl doctor -o json` while `worker` runs a twelfth of the
        time; what it named first (the checker compares)."""
        pid = worker.pid
        done = threading.Event()

        def throttle():
            # Not through Proc.signal: hundreds of stops a second are one
            # fault, recorded as such, not as stops the checker would
            # count one by one.
            while not done.is_set():
                try:
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(0.022)
                    os.kill(pid, signal.SIGCONT)
                    time.sleep(0.002)
                except ProcessLookupError:
                    return

        thread = threading.Thread(target=throttle, daemon=True)
        thread.start()
        try:
            r = subprocess.run(
                [binary("ccctl"), "--coordinator", self.coord_address,
                 "--timeout", "30s", "-o", "json", "doctor", *DOCTOR_ARGS],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                timeout=120)
        except subprocess.TimeoutExpired:
            return {"exit": None, "error": "ccctl doctor ran over 120 s"}
        finally:
            done.set()
            thread.join()
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        verdict = {"exit": r.returncode}
        try:
            findings = json.loads(r.stdout)["findings"]
            verdict["first"] = ({k: findings[0][k] for k in
                                 ("blame", "ranks", "metric", "evidence")}
                                if findings else None)
            verdict["findings"] = len(findings)
        except (ValueError, KeyError) as e:
            verdict["error"] = (f"no document ({e}): "
                                f"{r.stderr.strip()[-500:]}")
        return verdict

    def free_orphans(self):
        """Frees what killed clients left on the workers (their tensors
        would otherwise pile up over a long run)."""
        dead = [cid for cid, p in self.clients.items() if not p.alive()]
        if not dead:
            return
        prefixes = tuple(f"chaos.{cid}." for cid in dead)
        c = self.probe_client
        for r in range(self.args.workers):
            try:
                names = [n for n, _, _ in c.list_tensors(r)
                         if n.startswith(prefixes)]
                for n in names:
                    c._free(n, [r])
            except self.ccl.CclError:
                pass

    def reclaim_groups(self):
        """Destroys the subgroups of clients killed long enough ago that
        their ops have ended (a group destroyed under a running op would
        break that op's communicator on the other members): workers would
        otherwise keep, and re-make at every re-form, the groups of every
        client the injector kills."""
        due = [cid for cid, t in self.killed_clients.items()
               if history.now() - t > self.args.op_timeout + 5]
        if not due:
            return
        prefixes = tuple(f"chaos.{cid}." for cid in due)
        c = self.probe_client
        try:
            names = [g.name for g in c.groups()
                     if g.name.startswith(prefixes)]
        except self.ccl.CclError:
            return  # the world is re-forming: next time
        for name in names:
            try:
                c.destroy_group(name, timeout=self.args.op_timeout)
            except self.ccl.CclError as e:
                print(f"chaos: destroying {name} of a killed client: {e}",
                      flush=True)
                return
        for cid in due:
            del self.killed_clients[cid]

    # -- the run -----------------------------------------------------------

    def run(self):
        a = self.args
        self.setup()
        for _ in range(a.clients):
            self.start_client()
        t_start = history.now()
        end = t_start + a.duration
        injected = 0
        healthy = True
        time.sleep(min(3.0, a.duration / 10))
        while history.now() < end and healthy and a.faults:
            if a.max_faults and injected >= a.max_faults:
                break
            kind = self.rng.choice(a.faults)
            healthy = self.inject(kind)
            injected += 1
            if kind == "client":
                self.free_orphans()
            self.reclaim_groups()
            if any(p.deaths for p in [self.coord, *self.workers,
                                      *self.clients.values()]):
                break
            gap = self.rng.uniform(*a.fault_gap)
            time.sleep(max(0.0, min(gap, end - history.now())))
        while history.now() < end and not a.faults:
            time.sleep(min(1.0, end - history.now()))
            if any(p.deaths for p in [self.coord, *self.workers]):
                break
        if healthy:
            took = self.wait_recovered(history.now(), a.recovery_limit)
            healthy = took is not None
        self.faults.write({"ev": "traffic_end", "t": history.now()})
        # Drain: clients wait for their async ops and read every tensor.
        for p in self.clients.values():
            if p.alive():
                p.signal(signal.SIGTERM, "drain")
        deadline = time.monotonic() + 120
        for p in self.clients.values():
            while p.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if p.alive():
                p.kill("drain took too long")
                self.faults.write({"ev": "client_hung", "proc": p.name,
                                   "t": history.now()})
        for p in [self.coord, *self.workers]:
            p.check()
        self.stop_monitor.set()
        self.monitor_thread.join()
        self.faults.write({"ev": "end", "t": history.now()})
        with open(os.path.join(self.out, "rss.json"), "w") as f:
            json.dump(self.rss, f)
        with open(os.path.join(self.out, "rss_net.json"), "w") as f:
            json.dump(self.rss_net, f)
        with open(os.path.join(self.out, "kv.json"), "w") as f:
            json.dump(self.kv, f)
        deaths = [{"proc": p.name, "t": t, "rc": rc, "log": log}
                  for p in [self.coord, *self.workers, *self.clients.values()]
                  for t, rc, log in p.deaths]
        self.cluster.stop()
        return deaths, t_start


def main():
    p = argparse.ArgumentParser(
        description="Random faults under random traffic; the history is "
                    "checked against a model.")
    p.add_argument("--seed", type=int,
                   default=(int(os.environ["CCL_CHAOS_SEED"])
                            if os.environ.get("CCL_CHAOS_SEED") else None),
                   help="default: $CCL_CHAOS_SEED, else a random one "
                        "(printed, so that a failure can be replayed)")
    p.add_argument("--duration", type=float, default=120)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--clients", type=int, default=3)
    p.add_argument("--faults",
                   default="kill,stop,coord,client,partition",
                   help="comma list of " + ", ".join(FAULTS) + ", or none")
    p.add_argument("--max-faults", type=int, default=0)
    p.add_argument("--fault-gap", default="1,4",
                   help="seconds of plain traffic between faults: min,max")
    p.add_argument("--netns", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--device", default="cpu",
                   help="cpu, or cuda:N for every worker on GPU N as a "
                        "simulated host of its own (the GPU machine: "
                        "scripts/gpu-check.sh)")
    p.add_argument("--op-timeout", type=float, default=3.0)
    p.add_argument("--heartbeat-interval-ms", type=int, default=250)
    p.add_argument("--heartbeat-timeout-ms", type=int, default=2000)
    p.add_argument("--seq-gap-timeout-ms", type=int, default=3000)
    p.add_argument("--recovery-limit", type=float, default=90)
    p.add_argument("--out", default=None)
    p.add_argument("--report", default=None, help="write the report here")
    p.add_argument("--rss-after", type=float, default=None,
                   help="seconds of warm-up after which RSS growth is "
                        "checked (soak runs)")
    p.add_argument("--rss-limit", type=float, default=0.05)
    p.add_argument("--settle", action=argparse.BooleanOptionalAction,
                   default=True,
                   help="clients wait for a whole world after a failure "
                        "before their next op (docs/python.md); --no-settle "
                        "sends at once into a re-forming world")
    p.add_argument("--allow-dropped-groups", action="store_true",
                   help="a subgroup a re-form dropped is counted, not a "
                        "failure")
    args = p.parse_args()
    # SIGTERM (ctest's timeout, a person's kill) unwinds like Ctrl-C: the
    # daemons are stopped and the namespaces removed (atexit), not left.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    args.faults = ([] if args.faults == "none"
                   else [f for f in args.faults.split(",") if f])
    for f in args.faults:
        if f not in FAULTS:
            p.error(f"unknown fault {f}")
    args.fault_gap = tuple(float(x) for x in args.fault_gap.split(","))
    keep = args.out is not None
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix=f"chaos-{args.seed}-")
    print(f"chaos: seed {args.seed}, {args.duration:.0f} s, "
          f"{args.workers} workers, {args.clients} clients, faults "
          f"{','.join(args.faults) or 'none'}; history in {args.out}",
          flush=True)
    run = Run(args)
    try:
        deaths, t_start = run.run()
    finally:
        if run.cluster:
            run.cluster.stop()
    import check
    report = check.check(args.out, args, deaths)
    text = check.render(report)
    print(text, flush=True)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    if not report["ok"]:
        argv, skip = [], False
        for a in sys.argv:
            if skip or a.startswith("--seed") or a.startswith("--out"):
                skip = a in ("--seed", "--out")
                continue
            argv.append(a)
        print(f"chaos: FAILED with seed {args.seed}; replay: "
              f"{' '.join(argv)} --seed {args.seed}   (history kept in "
              f"{args.out})", flush=True)
        return 1
    if not keep:
        shutil.rmtree(args.out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
