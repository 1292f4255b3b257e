#!/usr/bin/env bash
# N real CPU workers (ccworker processes, Gloo) on this machine forming a
# world and running an all_reduce: what the coordinator's rendezvous and
# Gloo's full mesh cost with real processes, where the 2-core machine allows.
# Each round starts a local cluster (`ccctl cluster up --workers N`: cccoord
# and N ccworker), times it until every worker reports ready, runs two
# all_reduce (sum, 1024 float32 of rank+1; the values are checked to be
# N(N+1)/2), and stops the cluster.
#
#   bench/cpu_world.sh                  # -n 64 -r 3
#   bench/cpu_world.sh -n 16 -r 1 --no-record
#   bench/cpu_world.sh --hosts 8        # 8 simulated hosts, one cchostagent each
#
# Options: -n WORKERS (default 64); -r ROUNDS (default 3); --hosts H (the
#   workers register through H host agents: `cluster up --hosts H`; default
#   0, none); --record FILE (default bench/results/cpu_world_<date>.md,
#   cpu_world_hosts<H>_<date>.md with --hosts);
#   --no-record.
# Environment: BUILD (default <repo>/build, needs client/ccctl,
#   server/ccworker, coordinator/cccoord, and coordinator/cchostagent for
#   --hosts).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORKERS=64 ROUNDS=3 HOSTS=0
RECORD=default
COMMAND="bench/cpu_world.sh $*"
while [[ $# -gt 0 ]]; do
  case $1 in
    -n) WORKERS=$2; shift 2 ;;
    -r) ROUNDS=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --record) RECORD=$2; shift 2 ;;
    --no-record) RECORD=; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ $RECORD == default ]]; then
  RECORD=$ROOT/bench/results/cpu_world$( (( HOSTS > 0 )) && echo "_hosts$HOSTS")_$(date +%Y-%m-%d).md
fi
(( WORKERS >= 2 && ROUNDS >= 1 )) || { echo "-n must be >= 2, -r >= 1" >&2; exit 2; }
BINARIES="client/ccctl server/ccworker coordinator/cccoord"
(( HOSTS > 0 )) && BINARIES+=" coordinator/cchostagent"
for bin in $BINARIES; do
  [[ -x $BUILD/$bin ]] || { echo "no $BUILD/$bin; build ccctl, ccworker, cccoord (and cchostagent) first" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/cpu_world.XXXXXX)
export CCCTL_STATE_DIR=$TMP/cluster
# Snapshot the binaries, so that a rebuild during the run cannot swap them;
# ccctl finds ccworker and cccoord in its sibling folders.
for bin in $BINARIES; do
  mkdir -p "$TMP/bin/$(dirname $bin)"
  cp "$BUILD/$bin" "$TMP/bin/$bin"
done
CCCTL=$TMP/bin/client/ccctl
cleanup() {
  "$CCCTL" cluster down >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
rss_mib() {  # pids...
  ps -o rss= -p "$(IFS=,; echo "$*")" | awk '{s += $1} END {printf "%.0f", s / 1024}'
}
check() {  # json file
  python3 - "$1" "$WORKERS" <<'PY'
import json, sys
ranks = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
want = n * (n + 1) / 2
bad = [r["rank"] for r in ranks if any(v != want for v in r["values"])]
assert len(ranks) == n and not bad, f"{len(ranks)} ranks answered; wrong values on {bad}"
PY
}

START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
ROWS=""
for round in $(seq 1 "$ROUNDS"); do
  t=$(now)
  "$CCCTL" cluster up --workers "$WORKERS" --hosts "$HOSTS" --wait 600s >&2
  up=$(since "$t")
  t=$(now)
  "$CCCTL" --timeout 300s -o json allreduce --count 1024 >"$TMP/ar1.json"
  first=$(since "$t")
  t=$(now)
  "$CCCTL" --timeout 300s -o json allreduce --count 1024 >"$TMP/ar2.json"
  second=$(since "$t")
  check "$TMP/ar1.json"
  check "$TMP/ar2.json"
  workers=$(python3 -c "import json; print(' '.join(map(str, json.load(open('$CCCTL_STATE_DIR/state.json'))['workers'])))")
  coordinator=$(python3 -c "import json; print(json.load(open('$CCCTL_STATE_DIR/state.json'))['coordinator_pid'])")
  row=$(printf "%5d %7d %9s %12s %13s %12s %13s" "$round" "$WORKERS" "$up" "$first" "$second" \
    "$(rss_mib $workers)" "$(rss_mib "$coordinator")")
  echo "$row"
  ROWS+="$row"$'\n'
  "$CCCTL" cluster down >&2
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
HEADER=$(printf "%5s %7s %9s %12s %13s %12s %13s\n%5s %7s %9s %12s %13s %12s %13s" \
  round workers "up" "all_reduce1" "all_reduce2" "workersRSS" "coordRSS" \
  "" "" "(s)" "(s)" "(s)" "(MiB)" "(MiB)")
echo "$HEADER"
printf "%s" "$ROWS"

if [[ -n $RECORD ]]; then
  {
    echo "# $WORKERS CPU workers (real processes) forming a world and running an all_reduce"
    echo
    echo "\`$COMMAND\`, $START, load $LOAD_BEFORE -> $LOAD_AFTER"
    echo "($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'),"
    echo "$(. /etc/os-release && echo "$PRETTY_NAME"), gRPC $(dpkg-query -W -f='${Version}' libgrpc++1.51 2>/dev/null || echo '?'),"
    echo "libgloo0 $(dpkg-query -W -f='${Version}' libgloo0 2>/dev/null || echo '?'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))."
    echo
    echo "- up: \`ccctl cluster up --workers $WORKERS --hosts $HOSTS\` until every worker reports ready:"
    echo "  the processes start, register (with --hosts, through a cchostagent per"
    echo "  host: one RegisterHost call a host), and build the Gloo world (full mesh)."
    echo "- all_reduce1/2: \`ccctl allreduce --count 1024\` (client-seen, values checked)."
    echo "- RSS: summed over the worker processes, and the coordinator's, after the ops."
    echo
    echo '```'
    echo "$HEADER"
    printf "%s" "$ROWS"
    echo '```'
  } >"$RECORD"
  echo "# recorded in ${RECORD#$ROOT/}" >&2
fi
