#!/usr/bin/env python3
"""torch.distributed (NCCL) beside `ccctl bench`: the same ops, sizes and
iteration counts, timed the way nccl-tests times them (back-to-back launches
on the default stream, one synchronize, time / iters), busbw with
nccl-tests' factors. Writes a CSV with the columns ccctl bench --csv uses.

  python3 bench/peers/torch_nccl.py --ops all_reduce,all_gather \\
      -b 8 -e 2G -f 4 -n 20 -w 5 --csv-dir OUT
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    text = text.strip()
    if text[-1].upper() in UNITS:
        return int(text[:-1]) * UNITS[text[-1].upper()]
    return int(text)


def bus_factor(op, n):
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def make_call(op, size_bytes, rank, n):
    """Returns (a closure running one op, the element count) like ccctl sizes it."""
    count = size_bytes // 4
    if op not in ("all_reduce", "broadcast", "sendrecv"):
        count = count // n * n
    if count == 0:
        return None, 0
    dev = torch.device("cuda", rank)
    if op == "all_reduce":
        x = torch.ones(count, device=dev)
        return (lambda: dist.all_reduce(x)), count
    if op == "broadcast":
        x = torch.ones(count, device=dev)
        return (lambda: dist.broadcast(x, 0)), count
    if op == "all_gather":
        inp = torch.ones(count // n, device=dev)
        out = torch.empty(count, device=dev)
        return (lambda: dist.all_gather_into_tensor(out, inp)), count
    if op == "reduce_scatter":
        inp = torch.ones(count, device=dev)
        out = torch.empty(count // n, device=dev)
        return (lambda: dist.reduce_scatter_tensor(out, inp)), count
    if op == "alltoall":
        inp = torch.ones(count, device=dev)
        out = torch.empty(count, device=dev)
        return (lambda: dist.all_to_all_single(out, inp)), count
    if op == "sendrecv":
        # One direction, rank 0 to rank 1, as ccctl bench sendrecv measures.
        x = torch.ones(count, device=dev)
        if rank == 0:
            return (lambda: dist.send(x, 1)), count
        if rank == 1:
            return (lambda: dist.recv(x, 0)), count
        return (lambda: None), count
    raise ValueError(op)


def worker(rank, n, port, args, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n)
    sizes = []
    size = parse_size(args.minbytes)
    while size <= parse_size(args.maxbytes):
        sizes.append(size)
        size *= args.stepfactor
    for op in args.ops.split(","):
        for size in sizes:
            call, count = make_call(op, size, rank, n)
            if call is None:
                continue
            for _ in range(args.warmup):
                call()
            torch.cuda.synchronize()
            dist.barrier()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.iters):
                call()
            torch.cuda.synchronize()
            elapsed_us = (time.perf_counter() - start) * 1e6 / args.iters
            t = torch.tensor([elapsed_us], device=torch.device("cuda", rank))
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if rank == 0:
                results.append((op, count * 4, count, t.item()))
            del call
            torch.cuda.empty_cache()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", default="all_reduce")
    parser.add_argument("-b", "--minbytes", default="8")
    parser.add_argument("-e", "--maxbytes", default="2G")
    parser.add_argument("-f", "--stepfactor", type=int, default=4)
    parser.add_argument("-n", "--iters", type=int, default=20)
    parser.add_argument("-w", "--warmup", type=int, default=5)
    parser.add_argument("-g", "--gpus", type=int, default=2)
    parser.add_argument("--csv-dir", default=".")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.Manager()
    results = manager.list()
    mp.spawn(worker, args=(args.gpus, port, args, results), nprocs=args.gpus)
    by_op = {}
    for op, size, count, us in results:
        by_op.setdefault(op, []).append((size, count, us))
    print(f"# torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, "
          f"{args.gpus} GPUs, {args.iters} iters, {args.warmup} warmup")
    for op, rows in by_op.items():
        print(f"# {op}\n#{'size':>12} {'count':>12} {'time(us)':>10} "
              f"{'algbw':>8} {'busbw':>8}")
        path = os.path.join(args.csv_dir, f"torch_{op}.csv")
        with open(path, "w") as csv:
            csv.write("op,size,count,time_us,algbw,busbw\n")
            for size, count, us in rows:
                algbw = size / us / 1e3
                busbw = algbw * bus_factor(op, args.gpus)
                print(f"{size:>13} {count:>12} {us:>10.2f} {algbw:>8.2f} "
                      f"{busbw:>8.2f}")
                csv.write(f"{op},{size},{count},{us:.2f},{algbw:.3f},"
                          f"{busbw:.3f}\n")


if __name__ == "__main__":
    main()
