#!/usr/bin/env python3
"""Puts `ccctl bench --csv` files beside one or more peers' CSVs (the same
columns: bench/peers/*.py, bench/nccl_peer's nccl_peer_bench) and prints, per
op, a markdown table and a summary of ccctl's busbw over each peer's.

  python3 bench/compare.py --ccctl DIR/bench_{op}.csv \\
      --peer nccl=DIR/nccl_{op}.csv --peer torch=DIR/torch_{op}.csv \\
      --ops all_reduce,all_gather

`{op}` in a path is replaced by the op; a file may also hold several ops
(rows are picked by its `op` column). `--peer PATH --peer-name NAME` (one
peer) still works. A ratio is the peer's time over ccctl's at the same size,
which is ccctl busbw / peer busbw (same size and ranks, so the same factor)
without the CSV's rounding of small busbw; > 1 means ccctl is faster.
`ratio ip` compares the in-place columns where both files have them.
"""
import argparse
import csv
import os


def read(path, op):
    """{size: row} of `op` in the CSV at `path` ({} if there is none)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        rows = {}
        for r in csv.DictReader(f):
            if r.get("op", op) != op:
                continue
            rows[int(r["size"])] = r
        return rows


def human(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def number(row, key):
    """A positive float from the row, else None (absent, empty or 0)."""
    if not row:
        return None
    try:
        value = float(row.get(key) or 0)
    except ValueError:
        return None
    return value if value > 0 else None


def ratio(ours, peer, key):
    """peer time / ccctl time for the column `key` (time_us, ip_time_us)."""
    o, p = number(ours, key), number(peer, key)
    return p / o if o and p else None


def parse_peers(args):
    peers = []
    for spec in args.peer:
        name, sep, path = spec.partition("=")
        if not sep or "/" in name or not name:
            name, path = None, spec
        peers.append([name, path])
    if args.peer_name and len(peers) == 1:
        peers[0][0] = args.peer_name
    for i, peer in enumerate(peers):
        if peer[0] is None:
            peer[0] = "torch" if len(peers) == 1 else f"peer{i + 1}"
    return peers


def fmt(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def summary(name, rows, min_size, large_size):
    """One line: where ccctl stands against one peer over an op's sizes."""
    parts = []
    lows = []
    for key, label in (("time_us", "out of place"), ("ip_time_us", "in place")):
        got = [(s, ratio(o, p, key)) for s, o, p in rows if s >= min_size]
        got = [(s, r) for s, r in got if r is not None]
        if got:
            size, low = min(got, key=lambda x: x[1])
            lows.append(f"{low:.3f} ({human(size)}) {label}")
    if lows:
        parts.append(f"min {', '.join(lows)} over sizes >= {human(min_size)}")
    large = [ratio(o, p, "time_us") for s, o, p in rows if s >= large_size]
    large = [r for r in large if r is not None]
    if large:
        parts.append(f"{min(large):.3f}-{max(large):.3f} over sizes >= "
                     f"{human(large_size)}")
    both = [(s, o, p) for s, o, p in rows if number(o, "time_us") and
            number(p, "time_us")]
    if both:
        s, o, p = both[0]
        parts.append(f"at {human(s)} ccctl {float(o['time_us']):.2f} us, "
                     f"{name} {float(p['time_us']):.2f} us")
    if not parts:
        return f"- ccctl / {name}: no common sizes"
    return f"- ccctl / {name} busbw: " + "; ".join(parts)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--ccctl", required=True, help="path pattern with {op}")
    parser.add_argument("--peer", action="append", required=True,
                        help="[NAME=]path pattern with {op}; repeatable")
    parser.add_argument("--ops", required=True)
    parser.add_argument("--peer-name", help="the name of a single --peer")
    parser.add_argument("--min-size", type=int, default=8 << 10,
                        help="smallest size of the summary's minimum ratio")
    parser.add_argument("--large-size", type=int, default=128 << 20,
                        help="sizes the summary's range of ratios covers")
    args = parser.parse_args()
    peers = parse_peers(args)
    for op in args.ops.split(","):
        ours = read(args.ccctl.format(op=op), op)
        theirs = [(name, read(path.format(op=op), op)) for name, path in peers]
        print(f"\n### {op}\n")
        header = "| size | ccctl time (us) | ccctl busbw (GB/s) |"
        rule = "|---:|---:|---:|"
        # In-place ratios only where both sides measured in place.
        with_ip = {name: any(number(r, "ip_time_us") for r in rows.values())
                   and any(number(r, "ip_time_us") for r in ours.values())
                   for name, rows in theirs}
        for name, _ in theirs:
            header += (f" {name} time (us) | {name} busbw (GB/s) | "
                       f"ratio {name} |")
            rule += "---:|---:|---:|"
            if with_ip[name]:
                header += f" ratio {name} ip |"
                rule += "---:|"
        print(header)
        print(rule)
        sizes = set(ours)
        for _, rows in theirs:
            sizes |= set(rows)
        for size in sorted(sizes):
            o = ours.get(size)
            line = (f"| {human(size)} | {o['time_us'] if o else '-'} | "
                    f"{o['busbw'] if o else '-'} |")
            for name, rows in theirs:
                p = rows.get(size)
                line += (f" {p['time_us'] if p else '-'} | "
                         f"{p['busbw'] if p else '-'} | "
                         f"{fmt(ratio(o, p, 'time_us'), 3)} |")
                if with_ip[name]:
                    line += f" {fmt(ratio(o, p, 'ip_time_us'), 3)} |"
            print(line)
        print()
        for name, rows in theirs:
            common = [(s, ours.get(s), rows.get(s)) for s in sorted(sizes)]
            print(summary(name, common, args.min_size, args.large_size))


if __name__ == "__main__":
    main()
