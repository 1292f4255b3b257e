#!/usr/bin/python3
"""torch.distributed's Gloo backend, timed like `ccctl bench` (nccl-tests' columns).

Spawns NPROCS processes (default 2) on 127.0.0.1 that join a "gloo" process
group, then for each size from -b to -e (times -f) runs every requested op
(-o all_reduce,broadcast,...) -w times untimed and -n times timed. float32,
reductions sum, rooted ops root at -r. Ops on CPU tensors are synchronous,
so each call is timed on its own with time.perf_counter after one barrier
that follows the warmup (the same scheme as the workers' Bench in ccctl:
back-to-back ops, each one timed). A row is the max over ranks of the mean
time per op; algbw = size / time and busbw = algbw * nccl-tests' factor
(2(n-1)/n for all_reduce, 1 for broadcast and reduce, (n-1)/n for the
others). The size is nccl-tests': the whole gathered, scattered or
exchanged buffer, each rank's chunk being size / n.

all_reduce, broadcast and reduce run in place (the tensor is input and
output); all_gather, gather and scatter use torch's list forms (1.13's Gloo
has no single-tensor all_gather), alltoall all_to_all_single. torch 1.13's
Gloo has no reduce_scatter at all.

Run it with Debian's interpreter, which has python3-torch:
  /usr/bin/python3 bench/peers/torch_gloo.py -b 8 -e 64M -f 2 -n 20 -w 5
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter",
       "alltoall")
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def bus_factor(op, n):
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    return (n - 1) / n


def sizes(args):
    out, size = [], args.minbytes
    while size <= args.maxbytes:
        out.append(size)
        nxt = int(size * args.stepfactor)
        size = nxt if nxt > size else size + 1
    return out


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_call(op, count, rank, args):
    """One op of `count` elements per rank chunk, ready to be called."""
    n, root = args.nprocs, args.root
    ones = lambda k: torch.ones(k, dtype=torch.float32)
    tensor = ones(count)
    # Sums double the values per call: 2^(warmup + iters) stays far below
    # float32's inf, so no refill is timed.
    if op == "all_reduce":
        return lambda: dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    if op == "broadcast":
        return lambda: dist.broadcast(tensor, src=root)
    if op == "reduce":
        return lambda: dist.reduce(tensor, dst=root, op=dist.ReduceOp.SUM)
    if op == "all_gather":
        outputs = [ones(count) for _ in range(n)]
        return lambda: dist.all_gather(outputs, tensor)
    if op == "gather":
        outputs = [ones(count) for _ in range(n)] if rank == root else None
        return lambda: dist.gather(tensor, outputs, dst=root)
    if op == "scatter":
        inputs = [ones(count) for _ in range(n)] if rank == root else None
        return lambda: dist.scatter(tensor, inputs, src=root)
    if op == "alltoall":
        src, dst = ones(count * n), ones(count * n)
        return lambda: dist.all_to_all_single(dst, src)
    raise ValueError(op)


def worker(rank, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.nprocs)
    results = {}  # (op, bytes) -> mean seconds
    for op in args.ops:
        for nbytes in sizes(args):
            n = args.nprocs
            chunked = op in ("all_gather", "gather", "scatter", "alltoall")
            count = nbytes // 4 // (n if chunked else 1)
            if count == 0:
                continue
            call = make_call(op, count, rank, args)
            for _ in range(args.warmup):
                call()
            dist.barrier()
            total = 0.0
            for _ in range(args.iters):
                t0 = time.perf_counter()
                call()
                total += time.perf_counter() - t0
            results[(op, nbytes)] = total / args.iters
    dist.barrier()
    dist.destroy_process_group()
    queue.put((rank, results))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("8"))
    parser.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("64M"))
    parser.add_argument("-f", "--stepfactor", type=float, default=2.0)
    parser.add_argument("-n", "--iters", type=int, default=20)
    parser.add_argument("-w", "--warmup_iters", dest="warmup", type=int, default=5)
    parser.add_argument("-r", "--root", type=int, default=0)
    parser.add_argument("-o", "--ops", default=",".join(OPS),
                        help="comma-separated, of: " + ",".join(OPS))
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    args.ops = [o.strip().replace("allreduce", "all_reduce") for o in args.ops.split(",") if o.strip()]
    for op in args.ops:
        if op not in OPS:
            parser.error(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
    if args.stepfactor <= 1 or args.minbytes < 1 or args.maxbytes < args.minbytes:
        parser.error("need 1 <= -b <= -e and -f > 1")
    if args.iters < 1 or args.warmup < 0:
        parser.error("-n must be >= 1 and -w >= 0")
    # Loopback for Gloo's data connections, as the ccctl workers use.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.nprocs)]
    for p in procs:
        p.start()
    per_rank = {}
    for _ in procs:
        rank, res = queue.get()
        per_rank[rank] = res
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit(f"rank process exited with {p.exitcode}")

    n = args.nprocs
    document = {"peer": "torch.distributed gloo", "torch": torch.__version__,
                "python": sys.version.split()[0], "ranks": n, "type": "float32",
                "iters": args.iters, "warmup": args.warmup, "ops": {}}
    for op in args.ops:
        redop = "sum" if op in ("all_reduce", "reduce") else "none"
        root = args.root if op in ("broadcast", "reduce", "gather",
                                   "scatter") else -1
        keys = sorted(k[1] for k in per_rank[0] if k[0] == op)
        rows = []
        for nbytes in keys:
            t = max(per_rank[r][(op, nbytes)] for r in per_rank) * 1e6
            algbw = nbytes / t / 1e3
            rows.append({"size": nbytes, "count": nbytes // 4, "time_us": t,
                         "algbw": algbw, "busbw": algbw * bus_factor(op, n)})
        document["ops"][op] = {"redop": redop, "root": root, "rows": rows}
        print(f"# torch {torch.__version__} gloo {op}: {n} ranks, {args.iters} iters, "
              f"{args.warmup} warmup, timed per rank (max over ranks of the mean)")
        print("#%11s %12s %8s %6s %6s %8s %7s %7s" %
              ("size", "count", "type", "redop", "root", "time", "algbw", "busbw"))
        print("#%11s %12s %8s %6s %6s %8s %7s %7s" %
              ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)"))
        for r in rows:
            print("%12d %12d %8s %6s %6d %8.2f %7.2f %7.2f" %
                  (r["size"], r["count"], "float", redop, root, r["time_us"],
                   r["algbw"], r["busbw"]))
        avg = sum(r["busbw"] for r in rows) / len(rows) if rows else 0.0
        print(f"# Avg bus bandwidth    : {avg:g}\n#")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(document, f, indent=1)


if __name__ == "__main__":
    main()
