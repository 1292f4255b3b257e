#!/usr/bin/env python3
"""Puts `ccctl bench --csv` files beside a peer's CSVs (bench/peers/*.py
write the same columns) and prints, per op, a markdown table with the ratio
of busbw per size.

  python3 bench/compare.py --ccctl DIR/bench_{op}.csv --peer DIR/torch_{op}.csv \\
      --ops all_reduce,all_gather --peer-name torch
"""
import argparse
import csv
import os


def read(path):
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {int(r["size"]): r for r in csv.DictReader(f)}


def human(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ccctl", required=True, help="path pattern with {op}")
    parser.add_argument("--peer", required=True, help="path pattern with {op}")
    parser.add_argument("--ops", required=True)
    parser.add_argument("--peer-name", default="torch")
    args = parser.parse_args()
    for op in args.ops.split(","):
        ours = read(args.ccctl.format(op=op))
        peer = read(args.peer.format(op=op))
        print(f"\n### {op}\n")
        print(f"| size | ccctl time (us) | ccctl busbw (GB/s) | "
              f"{args.peer_name} time (us) | {args.peer_name} busbw (GB/s) | "
              f"ratio |")
        print("|---:|---:|---:|---:|---:|---:|")
        for size in sorted(set(ours) | set(peer)):
            o, p = ours.get(size), peer.get(size)
            ob = float(o["busbw"]) if o else None
            pb = float(p["busbw"]) if p else None
            ratio = f"{ob / pb:.3f}" if ob and pb else "-"
            print(f"| {human(size)} | {o['time_us'] if o else '-'} | "
                  f"{ob if ob is not None else '-'} | "
                  f"{p['time_us'] if p else '-'} | "
                  f"{pb if pb is not None else '-'} | {ratio} |")


if __name__ == "__main__":
    main()
