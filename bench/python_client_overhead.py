#!/usr/bin/python3
"""What the Python client costs beside ccctl's C++ client, per sync op.

One cluster, one run: for an all_reduce of 8 B and of 1 MiB (float32, sum)
it measures, in alternating rounds,

  ccctl e2e      `ccctl -o json bench all_reduce --e2e`: the C++ client
                 library sending sync all_reduces back to back (one
                 ReserveSequence RPC to the coordinator, one Submit per
                 rank), time per op as the client sees it;
  python e2e     the same loop through the Python client
                 (client.bench(..., e2e=True)): same tensors, same RPCs;
  python api     client.all_reduce(t) back to back: the torch-style call a
                 script makes (in place);
  worker         the op's own time on the workers (the Bench RPC's mean,
                 out of place, from the same ccctl run): what no client can
                 save;
  client CPU     CPU time the client process burns per op, all its threads
                 (gRPC's included): for Python, process_time() around the
                 all_reduce() loop; for ccctl, the CPU of `ccctl bench --e2e`
                 minus that of the same bench without --e2e, per e2e op.
                 On a loaded machine this is steadier than wall time.

Every figure is the median over rounds (the order of the clients
alternates); overhead = e2e - worker. Also printed: one
`ccctl allreduce --tensor` process per op (start, connect, op, exit), which
is what a shell script that calls ccctl pays.

    /usr/bin/python3 bench/python_client_overhead.py            # starts 2 CPU workers
    /usr/bin/python3 bench/python_client_overhead.py --device cuda
    /usr/bin/python3 bench/python_client_overhead.py --coordinator HOST:PORT

Binaries: CCL_BINARY_CCCTL / CCL_BINARY_CCCOORD / CCL_BINARY_CCWORKER, else
build/. The ccl package: PYTHONPATH (build/python after a build).
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULTS = {"ccctl": "build/client/ccctl", "cccoord": "build/coordinator/cccoord",
            "ccworker": "build/server/ccworker"}
for _name, _path in DEFAULTS.items():
    os.environ.setdefault(f"CCL_BINARY_{_name.upper()}",
                          os.path.join(ROOT, _path))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))

import ccl  # noqa: E402
from ccl.cluster import LocalCluster  # noqa: E402

SIZES = [("8 B", 8), ("1 MiB", 1 << 20)]


def ccctl(coordinator, *args):
    run = subprocess.run([os.environ["CCL_BINARY_CCCTL"], "--coordinator",
                          coordinator, *args], capture_output=True, text=True,
                         timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"ccctl {' '.join(args)} failed:\n{run.stderr}")
    return run.stdout


def child_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(client, coordinator, size, iters, warmup, python_first):
    bench = ["-o", "json", "bench", "all_reduce", "-b", str(size), "-e",
             str(size), "-n", str(iters), "-w", str(warmup)]
    out = {}

    def run_ccctl():
        c0 = child_cpu()
        (row,) = json.loads(ccctl(coordinator, *bench, "--e2e"))["rows"]
        c1 = child_cpu()
        ccctl(coordinator, *bench)
        c2 = child_cpu()
        out["ccctl_e2e"], out["worker"] = row["e2e_us"], row["time_us"]
        out["ccctl_cpu"] = ((c1 - c0) - (c2 - c1)) / iters * 1e6

    def run_python():
        (row,) = client.bench("all_reduce", size, iters=iters, warmup=warmup,
                              e2e=True)["rows"]
        out["python_e2e"], out["python_worker"] = row["e2e_us"], row["time_us"]
        with client.empty(size // 4, "float32") as t:
            for _ in range(warmup):
                client.all_reduce(t)
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(iters):
                client.all_reduce(t)
            out["python_api"] = (time.perf_counter() - wall) / iters * 1e6
            out["python_cpu"] = (time.process_time() - cpu) / iters * 1e6
            start = time.perf_counter()
            ccctl(coordinator, "allreduce", "--tensor", t.name)
            out["ccctl_process"] = (time.perf_counter() - start) * 1e6

    for step in ((run_python, run_ccctl) if python_first
                 else (run_ccctl, run_python)):
        step()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--coordinator", help="use this cluster")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    cluster = None
    if args.coordinator:
        coordinator = args.coordinator
    else:
        cluster = LocalCluster(workers=args.workers, device=args.device)
        coordinator = cluster.coordinator
    try:
        with ccl.Client(coordinator) as client:
            ranks = client.world_size
            devices = sorted({m["device"] for m in client.members.values()})
            rounds = {label: [] for label, _ in SIZES}
            for r in range(args.rounds):
                for label, size in (SIZES if r % 2 == 0 else SIZES[::-1]):
                    rounds[label].append(measure(client, coordinator, size,
                                                 args.iters, args.warmup,
                                                 python_first=r % 2 == 1))
    finally:
        if cluster is not None:
            cluster.stop()

    result = {"ranks": ranks, "devices": devices, "rounds": args.rounds,
              "iters": args.iters, "host": platform.node(),
              "cpus": os.cpu_count(), "sizes": {}}
    print(f"# all_reduce (float32, sum), {ranks} ranks on {', '.join(devices)},"
          f" {args.rounds} rounds x {args.iters} ops; median over rounds, "
          f"microseconds per op")
    print("| size | ccctl e2e (C++) | python e2e | python all_reduce() | "
          "worker (op itself) | C++ overhead | Python overhead | "
          "client CPU C++ | client CPU Python | ccctl process |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, _ in SIZES:
        med = {k: statistics.median(m[k] for m in rounds[label])
               for k in rounds[label][0]}
        result["sizes"][label] = {"median": med, "rounds": rounds[label]}
        print(f"| {label} | {med['ccctl_e2e']:.0f} | {med['python_e2e']:.0f} |"
              f" {med['python_api']:.0f} | {med['worker']:.0f} |"
              f" {med['ccctl_e2e'] - med['worker']:.0f} |"
              f" {med['python_e2e'] - med['worker']:.0f} |"
              f" {med['ccctl_cpu']:.0f} | {med['python_cpu']:.0f} |"
              f" {med['ccctl_process']:.0f} |")
    print()
    print("spread over rounds (min..max):")
    for label, _ in SIZES:
        spread = ", ".join(
            f"{k} {min(m[k] for m in rounds[label]):.0f}.."
            f"{max(m[k] for m in rounds[label]):.0f}"
            for k in ("ccctl_e2e", "python_e2e", "python_api", "worker",
                      "ccctl_cpu", "python_cpu"))
        print(f"  {label}: {spread}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
