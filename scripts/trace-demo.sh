#!/usr/bin/env bash
# A known sequence of ops on the running cluster (ccctl's address rules:
# --coordinator via CCCTL_COORDINATOR, else the local cluster), then its
# trace: `ccctl debug trace -o OUT`. Open OUT in https://ui.perfetto.dev or
# chrome://tracing. Needs at least 2 ranks; works on CPU and CUDA workers.
#
#   scripts/trace-demo.sh [OUT.json]       # default trace.json
#
# The sequence: a 1 MiB all_reduce, then a lone recv on rank 1 that fails
# after 3 s (DEADLINE_EXCEEDED). That breaks the world, which re-forms by
# itself at the next generation with the tensor kept (the script waits for
# it, at most 120 s); then a broadcast from rank 1, a send 0 -> 1, an
# all_reduce on a subgroup (ranks 1,0; made after the re-form, which drops
# subgroups), three async all_reduces waited together, and the trace. The
# tensor is freed at the end. CCCTL (default: ccctl on PATH, else
# build/client/ccctl) picks the binary.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-trace.json}
ccctl=${CCCTL:-$(command -v ccctl || echo "$root/build/client/ccctl")}
name=trace-demo.$$
group=trace-demo-pair-$$

"$ccctl" tensor alloc "$name" --shape 262144 --fill rank+1 >/dev/null
trap '"$ccctl" tensor free "$name" >/dev/null 2>&1 || true' EXIT
"$ccctl" allreduce --tensor "$name" >/dev/null
generation() { "$ccctl" -o json status | sed -n 's/^  "generation": "\([0-9]*\)",$/\1/p'; }
# True once the world is complete at a generation after $1 and every worker
# is ready in it: an op sent before that could leave a seq gap in the new
# generation, which stalls the next op for the workers' seq-gap timeout.
ready_after() {
  "$ccctl" -o json status 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
g = int(s["generation"])
workers = s.get("workers", [])
sys.exit(0 if s["state"] == "WORLD_STATE_COMPLETE" and g > int(sys.argv[1])
         and len(workers) == s["world_size"]
         and all(w.get("state") == "ready" and int(w.get("generation", 0)) == g
                 for w in workers) else 1)' "$1"
}
before=$(generation)
if "$ccctl" --timeout 3s recv --tensor "$name" --rank 1 --from 0 2>/dev/null; then
  echo "trace-demo: the lone recv did not fail" >&2
  exit 1
fi
# The broken world re-forms by itself at a later generation, the tensor kept.
reformed=0
for _ in $(seq 240); do
  if ready_after "$before"; then reformed=1; break; fi
  sleep 0.5
done
((reformed)) || { echo "trace-demo: the world did not re-form" >&2; exit 1; }
"$ccctl" broadcast --tensor "$name" --src 1 >/dev/null
"$ccctl" send --tensor "$name" --from 0 --to 1 >/dev/null
"$ccctl" group create "$group" --ranks 1,0 >/dev/null
"$ccctl" --group "$group" allreduce --tensor "$name" >/dev/null
ids=()
for _ in 1 2 3; do
  while read -r _ _ work; do ids+=("$work"); done < <(
    "$ccctl" allreduce --tensor "$name" --async | tail -n +2)
done
"$ccctl" wait "${ids[@]}" >/dev/null
"$ccctl" debug trace -o "$out"
