#!/usr/bin/env bash
# ccctl bench beside torch.distributed's Gloo backend, in one run, on 2 local
# CPU workers: every collective (reductions sum, rooted ops root 0), float32,
# nccl-tests' sizes and columns, and the ratio ccctl / torch per size, both
# for the op's time on the workers (data plane) and for the time the client
# sees per op (gRPC control plane included). reduce_scatter has no peer
# (torch 1.13's Gloo has none): its time is set beside all_reduce's at the
# same size instead (a ring reduce_scatter moves half the bytes). Then
# all_reduce in bfloat16 beside float32 at the same bytes (torch's Gloo
# cannot reduce bfloat16, pytorch#111131).
#
#   bench/cpu_gloo.sh                      # -b 8 -e 64M -f 2 -n 20 -w 5 -r 3
#   bench/cpu_gloo.sh -e 16M -n 10 -r 1 --no-record
#
# Options: -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP (as nccl-tests);
#   -r ROUNDS: sweeps per side, ccctl and torch alternating (default 3), each
#   figure is the median over rounds; --ops "all_reduce broadcast ..."
#   (default every collective); --no-bf16 leaves out the bfloat16 sweeps;
#   --record FILE (default bench/results/cpu_gloo_<date>.md); --no-record.
# Environment: BUILD (default <repo>/build, needs client/ccctl,
#   server/ccworker, coordinator/cccoord), PYTHON (default /usr/bin/python3,
#   Debian's, which has python3-torch).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
CCCTL=$BUILD/client/ccctl
PYTHON=${PYTHON:-/usr/bin/python3}
PEER=$ROOT/bench/peers/torch_gloo.py

MIN=8 MAX=64M FACTOR=2 ITERS=20 WARMUP=5 ROUNDS=3
OPS="all_reduce broadcast reduce all_gather reduce_scatter gather scatter alltoall"
BF16=1
RECORD=$ROOT/bench/results/cpu_gloo_$(date +%Y-%m-%d).md
COMMAND="bench/cpu_gloo.sh $*"
while [[ $# -gt 0 ]]; do
  case $1 in
    -b) MIN=$2; shift 2 ;;
    -e) MAX=$2; shift 2 ;;
    -f) FACTOR=$2; shift 2 ;;
    -n) ITERS=$2; shift 2 ;;
    -w) WARMUP=$2; shift 2 ;;
    -r) ROUNDS=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --no-bf16) BF16=0; shift ;;
    --record) RECORD=$2; shift 2 ;;
    --no-record) RECORD=; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
(( ROUNDS >= 1 )) || { echo "-r must be >= 1" >&2; exit 2; }

for bin in client/ccctl server/ccworker coordinator/cccoord; do
  [[ -x $BUILD/$bin ]] || { echo "no $BUILD/$bin; build ccctl, ccworker and cccoord first" >&2; exit 1; }
done
"$PYTHON" -c 'import torch.distributed as d; assert d.is_gloo_available()' ||
  { echo "$PYTHON cannot import torch with Gloo (apt install python3-torch)" >&2; exit 1; }

TMP=$(mktemp -d /tmp/cpu_gloo.XXXXXX)
export CCCTL_STATE_DIR=$TMP/cluster
cleanup() {
  "$CCCTL" cluster down >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Snapshot the binaries, so that a rebuild during the run cannot swap them;
# ccctl finds ccworker and cccoord in its sibling folders.
B_BINS="ccworker built $(date -u -r "$BUILD/server/ccworker" +%Y-%m-%dT%H:%M:%SZ), ccctl $(date -u -r "$CCCTL" +%Y-%m-%dT%H:%M:%SZ)"
for bin in client/ccctl server/ccworker coordinator/cccoord; do
  mkdir -p "$TMP/bin/$(dirname $bin)"
  cp "$BUILD/$bin" "$TMP/bin/$bin"
done
CCCTL=$TMP/bin/client/ccctl

START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "# local cluster: 2 CPU workers (state in $CCCTL_STATE_DIR)" >&2
"$CCCTL" cluster up --workers 2 >&2

run_ccctl() {  # op round
  echo "# [$2] ccctl bench $1 -b $MIN -e $MAX -f $FACTOR -n $ITERS -w $WARMUP --e2e" >&2
  "$CCCTL" --timeout 120s -o json bench "$1" -b "$MIN" -e "$MAX" -f "$FACTOR" \
    -n "$ITERS" -w "$WARMUP" --e2e >"$TMP/ccctl_$1.$2.json"
}
run_bf16() {  # round: all_reduce in bfloat16 from 1 MiB (smaller sizes are
  # latency, not arithmetic)
  local min=$(( $(numfmt --from=iec "${MIN^^}") > 1048576 ? $(numfmt --from=iec "${MIN^^}") : 1048576 ))
  echo "# [$1] ccctl bench all_reduce -d bfloat16 -b $min -e $MAX -f $FACTOR -n $ITERS -w $WARMUP" >&2
  "$CCCTL" --timeout 120s -o json bench all_reduce -d bfloat16 -b "$min" \
    -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" >"$TMP/ccctl_bf16.$1.json"
}
run_torch() {  # op round
  [[ $1 == reduce_scatter ]] && return 0  # no peer
  echo "# [$2] torch_gloo.py -o $1 -b $MIN -e $MAX -f $FACTOR -n $ITERS -w $WARMUP" >&2
  "$PYTHON" "$PEER" -o "$1" -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" \
    -w "$WARMUP" --json "$TMP/torch_$1.$2.json" >"$TMP/torch_$1.$2.txt"
}

# Interleaved: per round and op, ccctl's sweep and torch's back to back, the
# order alternating from op to op and from round to round, so that both see
# similar machine conditions and neither always goes first.
for round in $(seq 1 "$ROUNDS"); do
  j=0
  for op in $OPS; do
    if (( (round + j) % 2 == 0 )); then run_ccctl "$op" "$round"; run_torch "$op" "$round"
    else run_torch "$op" "$round"; run_ccctl "$op" "$round"; fi
    # bfloat16 right beside float32's sweep: the same machine conditions
    # (at the end of the round it ran slower, on both dtypes' evidence).
    if [[ $op == all_reduce ]] && (( BF16 )); then run_bf16 "$round"; fi
    j=$((j + 1))
  done
done
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
"$CCCTL" cluster down >/dev/null 2>&1 || true

# Context for the record.
export B_COMMAND="$COMMAND" B_START="$START" B_END="$END" B_OPS="$OPS" \
  B_ROUNDS="$ROUNDS" B_BF16="$BF16" B_ITERS="$ITERS" B_WARMUP="$WARMUP" \
  B_LOAD="$LOAD_BEFORE -> $LOAD_AFTER" B_TMP="$TMP" B_RECORD="$RECORD" \
  B_NPROC=$(nproc) \
  B_CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') \
  B_KERNEL=$(uname -sr) \
  B_OS=$(. /etc/os-release && echo "$PRETTY_NAME") \
  B_TORCH=$(dpkg-query -W -f='${Version}' python3-torch 2>/dev/null || echo '?') \
  B_GLOO=$(dpkg-query -W -f='${Version}' libgloo0 2>/dev/null || echo '?') \
  B_GRPC=$(dpkg-query -W -f='${Version}' libgrpc++1.51 2>/dev/null || echo '?') \
  B_BINS="$B_BINS" \
  B_BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || echo '?') \
  B_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') \
  B_DIRTY=$([[ -n $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]] && echo ' + local changes' || true)

"$PYTHON" - <<'PY'
import json, os, statistics

env = os.environ
tmp = env["B_TMP"]
rounds = int(env["B_ROUNDS"])


def factor(op, n):
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    return (n - 1) / n


def human(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def busbw(size, us, op, n):
    return size / us / 1e3 * factor(op, n) if us > 0 else 0.0


# torch runs all_reduce, broadcast and reduce in place and the others out of
# place (list forms, all_to_all_single): the like-for-like ccctl column.
LIKE = {"all_reduce": "ip", "broadcast": "ip", "reduce": "ip"}


def like(op):
    return LIKE.get(op, "oop")


HEAD = ["size", "dp oop us", "dp oop busbw", "dp ip us", "dp ip busbw",
        "client us", "client busbw", "torch us", "torch busbw",
        "ratio dp ip", "ratio dp oop", "ratio client"]
tables = {}
per_round = {}  # op -> [(min, mean) of the in-place ratio at >= 1 MiB]
for op in env["B_OPS"].split():
    times = {}  # size -> {column: [us per round]}
    n = 2
    per_round[op] = []
    for rd in range(1, rounds + 1):
        with open(f"{tmp}/ccctl_{op}.{rd}.json") as f:
            cc = json.load(f)
        th = {}
        if op != "reduce_scatter":
            with open(f"{tmp}/torch_{op}.{rd}.json") as f:
                th = {r["size"]: r for r in json.load(f)["ops"][op]["rows"]}
        n = cc["ranks"]
        big = []
        for r in cc["rows"]:
            t = times.setdefault(r["size"], {"oop": [], "ip": [], "e2e": [], "torch": []})
            t["oop"].append(r["time_us"])
            t["ip"].append(r["in_place"]["time_us"])
            t["e2e"].append(r["e2e_us"])
            if r["size"] in th:
                t["torch"].append(th[r["size"]]["time_us"])
                if r["size"] >= 1 << 20:
                    ours = (r["in_place"]["time_us"] if like(op) == "ip"
                            else r["time_us"])
                    big.append(th[r["size"]]["time_us"] / ours)
        if big:
            per_round[op].append((min(big), sum(big) / len(big)))
    rows = []
    for size in sorted(times):
        t = {k: statistics.median(v) if v else float("nan") for k, v in times[size].items()}
        row = {"size": size}
        for k in ("oop", "ip", "e2e", "torch"):
            row[k + "_us"] = t[k]
            row[k + "_busbw"] = busbw(size, t[k], op, n)
        tb = row["torch_busbw"]
        for k in ("ip", "oop", "e2e"):
            row["ratio_" + k] = row[k + "_busbw"] / tb if tb > 0 else float("nan")
        rows.append(row)
    tables[op] = rows


def cells(r):
    return [human(r["size"]), f"{r['oop_us']:.1f}", f"{r['oop_busbw']:.3f}",
            f"{r['ip_us']:.1f}", f"{r['ip_busbw']:.3f}", f"{r['e2e_us']:.1f}",
            f"{r['e2e_busbw']:.3f}", f"{r['torch_us']:.1f}",
            f"{r['torch_busbw']:.3f}", f"{r['ratio_ip']:.2f}",
            f"{r['ratio_oop']:.2f}", f"{r['ratio_e2e']:.2f}"]


def summary(op, rows):
    big = [r for r in rows if r["size"] >= 1 << 20]
    if not big:
        return ""
    if op == "reduce_scatter":
        if "all_reduce" not in tables:
            return ">= 1 MiB: no torch peer (torch 1.13's Gloo has no reduce_scatter)"
        ar = {r["size"]: r["ip_us"] for r in tables["all_reduce"]}
        parts = [r["ip_us"] / ar[r["size"]] for r in big if r["size"] in ar]
        return (">= 1 MiB: no torch peer (torch 1.13's Gloo has no reduce_scatter); "
                "in-place time / all_reduce's at the same size: min "
                f"{min(parts):.2f}, mean {sum(parts) / len(parts):.2f}, max "
                f"{max(parts):.2f} (a ring reduce_scatter moves half an "
                "all_reduce's bytes)")
    column = "ratio_" + like(op)
    where = "in place" if like(op) == "ip" else "out of place"
    lo = min(r[column] for r in big)
    mean = sum(r[column] for r in big) / len(big)
    lo_c = min(r["ratio_e2e"] for r in big)
    text = (f">= 1 MiB: data-plane ({where}, as torch's) busbw ratio min {lo:.2f}, "
            f"mean {mean:.2f} (aim >= 1.0); client-seen ratio min {lo_c:.2f}")
    if len(per_round[op]) > 1:
        text += f"; per round (min/mean dp {like(op)}): " + ", ".join(
            f"{a:.2f}/{b:.2f}" for a, b in per_round[op])
    return text


def title(op):
    what = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum, root 0",
            "broadcast": "root 0", "gather": "root 0",
            "scatter": "root 0"}.get(op, "no root")
    return (f"{op}: 2 CPU workers, float32, {what}; median of {rounds} round(s) of "
            f"{env['B_ITERS']} iters ({env['B_WARMUP']} warmup); times in us, busbw in GB/s")


# all_reduce in bfloat16 beside float32 at the same bytes (in place, medians).
bf16_rows = []
if env["B_BF16"] == "1" and "all_reduce" in tables:
    bf = {}
    for rd in range(1, rounds + 1):
        with open(f"{tmp}/ccctl_bf16.{rd}.json") as f:
            for r in json.load(f)["rows"]:
                bf.setdefault(r["size"], []).append(r["in_place"]["time_us"])
    f32 = {r["size"]: r["ip_us"] for r in tables["all_reduce"]}
    for size in sorted(bf):
        if size in f32:
            b = statistics.median(bf[size])
            bf16_rows.append({"size": size, "f32_us": f32[size], "bf16_us": b,
                              "f32_busbw": busbw(size, f32[size], "all_reduce", 2),
                              "bf16_busbw": busbw(size, b, "all_reduce", 2),
                              "ratio": f32[size] / b})
BF16_HEAD = ["size", "float32 us", "float32 busbw", "bfloat16 us",
             "bfloat16 busbw", "ratio bf16/f32"]


def bf16_cells(r):
    return [human(r["size"]), f"{r['f32_us']:.1f}", f"{r['f32_busbw']:.3f}",
            f"{r['bf16_us']:.1f}", f"{r['bf16_busbw']:.3f}", f"{r['ratio']:.2f}"]


BF16_TITLE = ("all_reduce (sum, in place), 2 CPU workers: bfloat16 beside float32 at "
              f"the same bytes; median of {rounds} round(s); ratio = bfloat16 busbw / "
              "float32 busbw (>= 1: bfloat16 no slower)")

text = []
for op, rows in tables.items():
    text.append("# " + title(op))
    widths = [max(len(h), 9) for h in HEAD]
    text.append("  ".join(h.rjust(w) for h, w in zip(HEAD, widths)))
    for r in rows:
        text.append("  ".join(c.rjust(w) for c, w in zip(cells(r), widths)))
    if summary(op, rows):
        text.append("# " + summary(op, rows))
    text.append("")
if bf16_rows:
    text.append("# " + BF16_TITLE)
    text.append("  ".join(h.rjust(14) for h in BF16_HEAD))
    for r in bf16_rows:
        text.append("  ".join(c.rjust(14) for c in bf16_cells(r)))
    text.append("")
print("\n".join(text))

record = env["B_RECORD"]
if record:
    os.makedirs(os.path.dirname(record), exist_ok=True)
    md = [f"# CPU Gloo: ccctl bench vs torch.distributed gloo ({env['B_START'][:10]})", "",
          f"Command: `{env['B_COMMAND'].strip()}` (run from the repository root)", "",
          f"- run: {env['B_START']} .. {env['B_END']}, load average {env['B_LOAD']}",
          f"- machine: {env['B_NPROC']} CPUs, {env['B_CPU']}; {env['B_OS']}, {env['B_KERNEL']}",
          f"- ccctl: commit {env['B_COMMIT']}{env['B_DIRTY']}, {env['B_BUILD_TYPE']} build "
          f"({env['B_BINS']}); libgloo0 {env['B_GLOO']}, gRPC {env['B_GRPC']}",
          f"- peer: python3-torch {env['B_TORCH']} (ProcessGroupGloo), /usr/bin/python3",
          "- 2 workers (or 2 torch ranks) + the client share the CPUs, so noise is high; "
          f"{rounds} round(s), in each the ccctl sweep and the torch sweep of an op ran "
          "back to back, the order alternating; every figure is the median over rounds",
          "",
          "Columns: `dp` = time of one op on the workers (`ccctl bench`, max over "
          "ranks of the mean), out of place (`oop`) and in place (`ip`); `client` = "
          "time per op seen by the client, RPCs included (`--e2e`, out of place); "
          "`torch` = torch.distributed gloo, timed per rank the same way, in place for "
          "all_reduce, broadcast and reduce and out of place for the others (its list "
          "forms, all_to_all_single); "
          "busbw in GB/s (nccl-tests: x 2(n-1)/n for all_reduce, x 1 for broadcast and reduce, x (n-1)/n for the others; size is the whole gathered, scattered or exchanged buffer); "
          "ratios are ccctl busbw / torch busbw; the summary under each table uses "
          "the like-for-like one (`dp ip` where torch runs in place, `dp oop` "
          "where it does not).", ""]
    for op, rows in tables.items():
        md.append(f"## {op}")
        md.append("")
        md.append(title(op))
        md.append("")
        md.append("| " + " | ".join(HEAD) + " |")
        md.append("|" + "---:|" * len(HEAD))
        for r in rows:
            md.append("| " + " | ".join(cells(r)) + " |")
        md.append("")
        if summary(op, rows):
            md.append(summary(op, rows))
            md.append("")
    if bf16_rows:
        md.append("## all_reduce: bfloat16 beside float32")
        md.append("")
        md.append(BF16_TITLE)
        md.append("")
        md.append("| " + " | ".join(BF16_HEAD) + " |")
        md.append("|" + "---:|" * len(BF16_HEAD))
        for r in bf16_rows:
            md.append("| " + " | ".join(bf16_cells(r)) + " |")
        md.append("")
    md.append("## CSV (medians)")
    md.append("")
    md.append("```")
    md.append("op,size,dp_oop_us,dp_oop_busbw,dp_ip_us,dp_ip_busbw,client_us,client_busbw,"
              "torch_us,torch_busbw,ratio_dp_ip,ratio_dp_oop,ratio_client")
    for op, rows in tables.items():
        for r in rows:
            md.append(",".join([op, str(r["size"])] + [f"{r[k]:.4g}" for k in (
                "oop_us", "oop_busbw", "ip_us", "ip_busbw", "e2e_us", "e2e_busbw",
                "torch_us", "torch_busbw", "ratio_ip", "ratio_oop", "ratio_e2e")]))
    md.append("```")
    with open(record, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"# recorded in {os.path.relpath(record)}")
PY
