#!/usr/bin/env bash
# The GPU verdict in one device call (see ../shared/GPU.md).
#
# Here (no GPU), build and bundle:
#   scripts/gpu-check.sh build
# On the GPU machine (device run, carry=["build-nccl/devbundle"]):
#   scripts/gpu-check.sh            # or: scripts/gpu-check.sh run
#   scripts/gpu-check.sh checks     # the in-process, conformance and
#                                   # failure suites (the verdict's first
#                                   # piece; then cluster, python, peers)
#   scripts/gpu-check.sh latency    # a fresh cluster, then only what a
#                                   # client pays per op (--e2e,
#                                   # client_latency, a plan's flight record);
#                                   # then the same with --busy-poll-us 1000
#   scripts/gpu-check.sh latency1   # the same on one GPU (1 worker)
#   CCL_GPU_UNTIL=STEP ...          # skip every step after STEP
#   scripts/gpu-check.sh peer       # only the bare-NCCL peer steps (no
#                                   # cluster, no ccctl; about a minute,
#                                   # estimated, not yet timed)
#   scripts/gpu-check.sh simhosts   # the multi-rank correctness verdict on
#                                   # ONE GPU: every worker a simulated
#                                   # host (ccworker --host-id), joined by
#                                   # NCCL's network transport over
#                                   # loopback; in three parts for the
#                                   # 10-minute device call: simhosts1
#                                   # (suites), simhosts2 (failures),
#                                   # simhosts3 (clusters, Python,
#                                   # chaos). Correctness only:
#                                   # the GPU is shared and the bytes
#                                   # cross host sockets, so no figure
#                                   # from it is a speed figure.
#
# run: sources the bundle's env.sh, runs conformance_nccl_test, starts a
# 2-worker cuda cluster with ccctl, runs an all_reduce, every examples/*.yaml
# and a bench sweep (8 B .. 2 GiB, -f 4) of every op, all_reduce's small
# sizes in CUDA graphs (-G 10) and what a client sees per op (--e2e,
# bench/client_latency); then, with the cluster
# down, the same sweep on bare NCCL (bench/nccl_peer: nccl_peer_bench, also
# with CUDA graphs and checked on the device) and on torch.distributed, and
# bench/compare.py's ratios ccctl / peer per op. Logs and CSVs go under $OUT
# (default /tmp/gpu-check); a summary is printed last and the exit status is
# the number of failed steps (capped at 100).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CCL_GPU_BUILD_DIR:-$root/build-nccl}
bundle=$build/devbundle
mode=${1:-run}

if [[ $mode == build ]]; then
  set -e
  cmake -S "$root" -B "$build" -DCMAKE_CUDA_ARCHITECTURES=90
  make -C "$build" -j"${JOBS:-2}" ccworker cccoord ccctl cchostagent \
    conformance_nccl_test inprocess_conformance_nccl_test failure_nccl_test \
    groups_nccl_test fresh_world_nccl_test nccl_peer_bench client_latency
  rm -rf "$bundle"
  # eu-stack (elfutils), when here, goes along for worker_stacks below.
  stack_tool=()
  if command -v eu-stack >/dev/null; then stack_tool=("$(command -v eu-stack)"); fi
  # From a worktree outside the main checkout's parent, name the tool.
  "${CCL_DEVICE_BUNDLE:-$root/../shared/tools/device-bundle}" "$bundle" \
    "$build/server/ccworker" \
    "$build/coordinator/cccoord" "$build/client/ccctl" \
    "$build/coordinator/cchostagent" \
    "$build/tests/integration/groups_nccl_test" \
    "$build/tests/integration/fresh_world_nccl_test" \
    "$build/tests/gpu/conformance_nccl_test" \
    "$build/tests/conformance/inprocess_conformance_nccl_test" \
    "$build/tests/integration/failure_nccl_test" "$build/bench/nccl_peer_bench" \
    "$build/bench/client_latency" "${stack_tool[@]}"
  # RelWithDebInfo binaries make a ~120 MB bundle; the carry limit is 64 MiB.
  strip --strip-debug "$bundle"/bin/* "$bundle"/lib/* 2>/dev/null || true
  # The Python client is pure Python: its sources and the stubs generated
  # here (the GPU machine has no protoc).
  "$root/client/python/stage.sh" "$bundle/python"
  du -sh "$bundle"
  exit 0
fi

[[ -f $bundle/env.sh ]] || { echo "no bundle at $bundle; run '$0 build' first" >&2; exit 2; }
# shellcheck disable=SC1091
source "$bundle/env.sh"
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export CCL_BINARY_CCWORKER=$bundle/bin/ccworker
export CCL_BINARY_CCCOORD=$bundle/bin/cccoord
export CCL_BINARY_CCCTL=$bundle/bin/ccctl
export CCCTL_STATE_DIR=$OUT/ccctl-state
mkdir -p "$CCCTL_STATE_DIR"
ccctl=$bundle/bin/ccctl
# The failure suites' DumpStacks looks for eu-stack on PATH (the GPU
# machine has no gdb): a hung worker's threads then reach the log.
[[ -x $bundle/bin/eu-stack ]] && export PATH="$bundle/bin:$PATH"

# A run cut short (the device call's time limit, Ctrl-C) must not leave
# workers holding the GPUs: the next run on the same machine would measure
# beside them (a killed run once left a GPU at 100 % and every small op 10x
# slower in the next).
cleanup() {
  "$bundle/bin/ccctl" cluster down >/dev/null 2>&1
  CCCTL_STATE_DIR=$OUT/cpu-state "$bundle/bin/ccctl" cluster down >/dev/null 2>&1
  pkill -KILL -f "^$bundle/bin/" 2>/dev/null
  return 0
}
trap 'cleanup; exit 130' INT TERM
trap cleanup EXIT

failures=0
summary=()
# CCL_GPU_UNTIL=NAME: the steps after step NAME are skipped (a run that
# only needs to reach one step costs less device time).
until_step=${CCL_GPU_UNTIL:-}
reached_until=0
step() {  # step NAME TIMEOUT_S CMD...: runs CMD, logs to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  if ((reached_until)); then
    summary+=("$(printf '%-28s %-12s' "$name" "SKIP")")
    return 0
  fi
  [[ $name == "$until_step" ]] && reached_until=1
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local verdict=PASS
  if [[ $rc -ne 0 ]]; then verdict="FAIL(rc=$rc)"; failures=$((failures + 1)); fi
  summary+=("$(printf '%-28s %-12s %4ss' "$name" "$verdict" $((SECONDS - start)))")
  echo "== $name: $verdict"
  if [[ $rc -ne 0 ]]; then
    tail -n 25 "$OUT/$name.log"
    worker_stacks "$name"
  fi
}
# Every thread's stack of every worker still running, after a failed step:
# a worker stuck in a call shows where (the GPU machine has no debugger;
# the bundle carries eu-stack when the build machine had it).
worker_stacks() {
  [[ -x $bundle/bin/eu-stack ]] || return 0
  local pid
  for pid in $(pgrep -f "^$bundle/bin/ccworker"); do
    timeout 30 "$bundle/bin/eu-stack" -p "$pid" >"$OUT/$1.stacks.$pid" 2>&1
  done
}

ops=all_reduce,all_gather,reduce_scatter,broadcast,reduce,alltoall,sendrecv,gather,scatter
peer=$bundle/bin/nccl_peer_bench
# Bare NCCL (bench/nccl_peer/nccl_peer_bench), never beside a running
# cluster. First what a non-blocking communicator costs per enqueue (it
# bounds the worker's small-op latency) and that it leaves the data plane
# alone; then every op 8 B .. 2 GiB with ccctl bench's sizes and iterations
# (sendrecv as nccl-tests' ring), the time per op the slowest rank's (-a 3)
# as ccctl bench and torch_nccl.py report it; all_reduce's small sizes in
# CUDA graphs (-G 10, as PERF.md's nccl-tests figure) and on a non-blocking
# communicator; and the peer's own results checked on the device: every op,
# several dtypes and reduce ops, a non-zero root, graphs, non-blocking.
peer_steps() {
  step nccl_launch_latency 120 "$peer" --launch-latency -n 2000
  step nccl_peer 300 "$peer" "$ops" -b 8 -e 2G -f 4 -n 20 -w 5 -c 0 -a 3 \
    --csv "$OUT/nccl_{op}.csv"
  step nccl_peer_graph 120 "$peer" all_reduce -b 8 -e 512K -f 2 -n 20 -w 5 \
    -c 0 -a 3 -G 10 --csv "$OUT/nccl_graph_{op}.csv"
  step nccl_peer_nonblocking 120 "$peer" all_reduce -b 8 -e 32M -f 4 -n 20 \
    -w 5 -c 0 -a 3 --comm-blocking 0 --csv "$OUT/nccl_nonblocking_{op}.csv"
  step nccl_peer_check 120 "$peer" "$ops" -b 8 -e 64M -f 8 -n 2 -w 1 -c 1
  step nccl_peer_check_graph 120 "$peer" "$ops" -b 8 -e 1M -f 32 -n 2 -w 1 \
    -c 1 -G 2
  step nccl_peer_check_nonblocking 120 "$peer" "$ops" -b 8 -e 1M -f 32 -n 2 \
    -w 1 -c 1 --comm-blocking 0
  local spec dtype redop r
  for spec in "bfloat16 sum 1" "half avg 0" "int32 max 1" "int8 prod 0" \
    "f8e4m3 sum 1" "uint64 sum 0" "double prod 1"; do
    read -r dtype redop r <<<"$spec"
    step "nccl_peer_check_${dtype}_$redop" 120 "$peer" "$ops" -b 8 -e 4M \
      -f 16 -n 2 -w 1 -c 1 -d "$dtype" -o "$redop" -r "$r"
  done
}

report() {
  {
    python3 "$root/bench/compare.py" --ccctl "$OUT/bench_{op}.csv" \
      --peer nccl="$OUT/nccl_{op}.csv" --peer torch="$OUT/torch_{op}.csv" \
      --ops "$ops"
    # ccctl bench -G writes bench_graph_all_reduce.csv once it has -G.
    python3 "$root/bench/compare.py" --ccctl "$OUT/bench_graph_{op}.csv" \
      --peer nccl_graph="$OUT/nccl_graph_{op}.csv" --ops all_reduce
  } >"$OUT/compare.md" 2>&1 || true
  echo
  echo "==== gpu-check summary ($OUT)"
  printf '%s\n' "${summary[@]}"
  cat "$OUT/compare.md" 2>/dev/null
  echo; cat "$OUT/nccl_launch_latency.log" 2>/dev/null
  echo; grep -v '^#  rank' "$OUT/nccl_peer_nonblocking.log" 2>/dev/null
  echo; grep -h '^# client' "$OUT/bench_e2e_all_reduce.log" 2>/dev/null
  cat "$OUT/client_latency.log" 2>/dev/null
  python3 - "$OUT/plan_flight.json" <<'PY' 2>/dev/null || true
import json, sys
for rank in json.load(open(sys.argv[1]))["ranks"]:
    t = rank["records"][-1]["timing"]
    print(f"# last plan on rank {rank['rank']}: queue {t['queue_us']:.1f} us, "
          f"device (summed) {t['device_us']:.1f} us, total {t['total_us']:.1f} us")
PY
  echo "failed steps: $failures"
}

python_steps() {
  # The Python client on 2 CUDA workers: the same pytest suites as CI (each
  # starts its own clusters), when the image's python3 has grpcio, protobuf,
  # numpy and pytest; its overhead beside ccctl's C++ client.
  python_env=(env PYTHONPATH="$bundle/python" CCL_TEST_DEVICE=cuda
    CCL_TEST_WORKERS="${CCL_TEST_WORKERS:-2}" CCL_SOURCE_DIR="$root"
    PYTHONDONTWRITEBYTECODE=1)
  # One line: an indented second line was an IndentationError, which
  # skipped the suites as if a module were missing.
  if "${python_env[@]}" python3 -c 'import grpc, google.protobuf, numpy, pytest, ccl.v1.worker_pb2_grpc; print("grpcio", grpc.__version__, "protobuf", google.protobuf.__version__)' \
      >"$OUT/python_imports.log" 2>&1; then
    for suite in ops groups errors; do
      step "python_$suite" 300 "${python_env[@]}" python3 -m pytest -q \
        -p no:cacheprovider -rs "$root/client/python/tests/test_$suite.py"
    done
    # A speed figure: not on simulated hosts, whose GPU is shared.
    if [[ -z ${CCL_TEST_SIMULATED_HOSTS:-} ]]; then
      step python_overhead 300 "${python_env[@]}" python3 \
        "$root/bench/python_client_overhead.py" --device cuda \
        --json "$OUT/python_overhead.json"
    fi
  else
    summary+=("$(printf '%-28s %-12s' python_client "SKIP(imports)")")
    echo "== python client: skipped, python3 lacks a module:"
    cat "$OUT/python_imports.log"
  fi
}

checks_steps() {
  # The in-process suite (the cases Gloo passes in CI, here on NCCL), then
  # the same ops through real workers and their RPCs.
  step inprocess_conformance_nccl_test 300 \
    "$bundle/bin/inprocess_conformance_nccl_test" \
    --gtest_output="xml:$OUT/inprocess_conformance_nccl_test.xml"
  step conformance_nccl_test 300 "$bundle/bin/conformance_nccl_test" \
    --gtest_output="xml:$OUT/conformance_nccl_test.xml"

  # The NCCL abort path: workers killed (a 1 GiB all_reduce waiting for the
  # victim in the survivor's kernel), stopped, and the coordinator restarted;
  # each time the survivor aborts, the world re-forms and computes correctly.
  step failure_nccl_test 420 env CCL_FAILURE_REPEATS="${CCL_FAILURE_REPEATS:-5}" \
    "$bundle/bin/failure_nccl_test" --gtest_output="xml:$OUT/failure_nccl_test.xml"
}

# Device fills and pinned copies are bit-identical to the CPU path: the same
# fills on a CPU cluster and on the CUDA one give the same checksums.
# Run through `bash -c` (exported), which shellcheck cannot follow.
# shellcheck disable=SC2317
fills_match() {
  local cpu_state=$OUT/cpu-state out_cuda=$OUT/fills-cuda.txt out_cpu=$OUT/fills-cpu.txt
  CCCTL_STATE_DIR=$cpu_state "$ccctl" cluster up --workers 2 --device cpu >/dev/null || return 1
  local i=0
  for spec in "random --seed 7" "arange" "arange+rank" "affine --value -3 --rank-scale 100 --step 0.37"; do
    for dtype in float32 float16 bfloat16 int8 fp8_e4m3; do
      i=$((i + 1))
      for dir in "$CCCTL_STATE_DIR" "$cpu_state"; do
        # shellcheck disable=SC2086
        CCCTL_STATE_DIR=$dir "$ccctl" tensor alloc "f$i" --shape 100003 --dtype $dtype --fill $spec >/dev/null || return 1
      done
      CCCTL_STATE_DIR=$CCCTL_STATE_DIR "$ccctl" -o json tensor read "f$i" --limit 0 | grep checksum >>"$out_cuda"
      CCCTL_STATE_DIR=$cpu_state "$ccctl" -o json tensor read "f$i" --limit 0 | grep checksum >>"$out_cpu"
    done
  done
  CCCTL_STATE_DIR=$cpu_state "$ccctl" cluster down >/dev/null
  echo "$i fills x 2 ranks compared"; diff "$out_cpu" "$out_cuda" && [[ -s $out_cpu ]]
}
export -f fills_match
export ccctl OUT CCCTL_STATE_DIR

cluster_steps() {
  step cluster_up 120 "$ccctl" cluster up --workers 2 --device cuda
  step status 30 "$ccctl" status
  step allreduce_sum 60 "$ccctl" allreduce --op sum
  # What a client sees per op, small sizes (the RPCs and the op together).
  step bench_e2e_all_reduce 120 "$ccctl" bench all_reduce -b 8 -e 1M -f 4 \
    -n 200 -w 20 --e2e --csv "$OUT/e2e_all_reduce.csv"
  if [[ -z ${CCL_GPU_QUICK:-} ]]; then
  for yaml in "$root"/examples/*.yaml; do
    step "run_$(basename "$yaml" .yaml)" 120 "$ccctl" run "$yaml"
  done
  # Subgroups on 2 GPUs: a pair in reverse order, and a one-rank group (rank 0
  # takes part in the split as a non-member).
  step group_create 60 "$ccctl" group create pair --ranks 1,0
  step group_create_solo 60 "$ccctl" group create solo --ranks 1
  step group_allreduce 60 bash -c "'$ccctl' --group pair allreduce --op sum | tee /dev/stderr | grep -c '\[3.0\]' | grep -qx 2"
  step group_solo_broadcast 60 "$ccctl" --group solo broadcast --src 1
  step group_status 30 "$ccctl" group ls
  step fills_match_cpu 120 bash -c fills_match
  
  # Results checked on the device (-c 1), several dtypes.
  for dtype in float32 bfloat16 float16 int32; do
    step "bench_check_$dtype" 120 "$ccctl" bench all_reduce -b 8 -e 256M -f 16 \
      -n 5 -w 2 -c 1 -d "$dtype"
  done
  step bench_check_group 120 "$ccctl" --group pair bench reduce_scatter -b 1K \
    -e 64M -f 16 -n 5 -w 2 -c 1
  
  # A known sequence with a lone recv that times out (the world re-forms, so
  # the groups above are gone afterwards), as a Chrome/Perfetto trace.
  step trace_nccl 240 env CCCTL="$ccctl" "$root/scripts/trace-demo.sh" \
    "$OUT/trace_nccl.json"
  fi

  for op in ${ops//,/ }; do
    step "bench_$op" 150 "$ccctl" bench "$op" -b 8 -e 2G -f 4 -n 20 -w 5 \
      --csv "$OUT/bench_$op.csv"
  done
  # all_reduce's small sizes with the timed loop in CUDA graphs (-G 10, as
  # the peer's nccl_peer_graph step and PERF.md's nccl-tests figure).
  step bench_graph_all_reduce 150 "$ccctl" bench all_reduce -b 8 -e 512K \
    -f 2 -n 20 -w 5 -G 10 --csv "$OUT/bench_graph_all_reduce.csv"
  latency_steps
  # Worker logs (the state dir holds them) help when something failed.
  step cluster_down 60 "$ccctl" cluster down
  cp -r "$CCCTL_STATE_DIR" "$OUT/cluster-logs" 2>/dev/null || true
}

latency_steps() {  # latency_steps [SUFFIX of the step names]
  local suffix=${1:-}
  # A client's cost per 8-byte all_reduce in pieces: a bare fan-out, one
  # op (and the workers' share), without the agreement, and in a plan of
  # 1000 ops.
  step "client_latency$suffix" 150 "$bundle/bin/client_latency" --coordinator \
    "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["coordinator"])' \
      "$CCCTL_STATE_DIR/state.json")" --iters 2000 --plan 1000
  # Where a plan's time goes: each worker's flight record of the last plan
  # (its ops share the plan's timing: queue, summed device time, total).
  step "plan_flight$suffix" 30 bash -c "'$ccctl' -o json debug ops -n 2 >'$OUT/plan_flight$suffix.json'"
}

# Two workers on one GPU that claim one host: the second is refused at
# registration with the message a user sees (printed into the log), never
# a re-form loop; with no host id at all (hostname and boot id), the same;
# and ccctl cluster up refuses a one-GPU cluster of fewer hosts than
# workers before it starts anything.
# shellcheck disable=SC2317
same_host_refused() {
  local dir=$OUT/same-host ok=0 case
  mkdir -p "$dir"
  for case in "--host-id onehost" ""; do
    rm -f "$dir/coord.port"
    "$bundle/bin/cccoord" --world-size 2 --listen 127.0.0.1:0 \
      --port-file "$dir/coord.port" >"$dir/coord.log" 2>&1 &
    local coord=$! i address
    for i in $(seq 100); do [[ -s $dir/coord.port ]] && break; sleep 0.1; done
    address=127.0.0.1:$(cat "$dir/coord.port")
    # shellcheck disable=SC2086
    "$bundle/bin/ccworker" --coordinator "$address" --device cuda:0 \
      --rank 0 $case >"$dir/w0.log" 2>&1 &
    local w0=$!
    for i in $(seq 300); do
      grep -q "rank 0 registered" "$dir/coord.log" && break; sleep 0.1
    done
    # shellcheck disable=SC2086
    timeout 60 "$bundle/bin/ccworker" --coordinator "$address" \
      --device cuda:0 --rank 1 $case >"$dir/w1.log" 2>&1
    local rc=$?
    kill "$w0" "$coord" 2>/dev/null; wait "$w0" "$coord" 2>/dev/null
    echo "== two workers on cuda:0 with '${case:-no host id}': the second exited $rc:"
    cat "$dir/w1.log"
    if [[ $rc -ne 0 && $rc -ne 124 ]] &&
        grep -q "Duplicate GPU detected" "$dir/w1.log" &&
        grep -q "host id of its own" "$dir/w1.log"; then
      ok=$((ok + 1))
    fi
  done
  echo "== ccctl cluster up --workers 2 --device cuda:0 --hosts 1:"
  CCCTL_STATE_DIR=$dir/state "$ccctl" cluster up --workers 2 --device cuda:0 \
    --hosts 1 2>&1 && return 1
  [[ $ok -eq 2 ]]
}
export -f same_host_refused
export bundle

# The multi-rank verdict on one GPU, every worker a simulated host. Its
# suites build their own workers; CCL_TEST_SIMULATED_HOSTS makes them put
# each on cuda:0 with a host id of its own.
simhosts_suites() {
  export CCL_TEST_SIMULATED_HOSTS=1
  step same_host_refused 180 bash -c same_host_refused
  step fresh_world_2 300 env CCL_FRESH_WORLD_WORKERS=2 \
    CCL_FRESH_WORLD_REPEATS="${CCL_FRESH_WORLD_REPEATS:-10}" \
    "$bundle/bin/fresh_world_nccl_test"
  step conformance_nccl_test_2_3_4 420 "$bundle/bin/conformance_nccl_test" \
    --gtest_output="xml:$OUT/conformance_nccl_test.xml"
  step groups_nccl_test_4 300 "$bundle/bin/groups_nccl_test" \
    --gtest_output="xml:$OUT/groups_nccl_test.xml"
  step fresh_world_4 300 env CCL_FRESH_WORLD_WORKERS=4 \
    CCL_FRESH_WORLD_REPEATS="${CCL_FRESH_WORLD_REPEATS:-5}" \
    "$bundle/bin/fresh_world_nccl_test"
}

simhosts_failures() {
  export CCL_TEST_SIMULATED_HOSTS=1
  # Kills, stops, a coordinator restart, refusals, and --elastic shrink
  # 4 -> 3 (ncclCommShrink), on four simulated hosts.
  step failure_nccl_test_4 560 env CCL_FAILURE_WORKERS=4 \
    CCL_FAILURE_REPEATS="${CCL_FAILURE_REPEATS:-2}" \
    "$bundle/bin/failure_nccl_test" --gtest_output="xml:$OUT/failure_nccl_test.xml"
}

# ccctl doctor on four simulated hosts of one GPU (CUDA workers, NCCL's
# network transport): the matrix is measured and checked on the device,
# and a worker that runs a twelfth of the time (SIGSTOP 22 ms of every
# 24) is the rank it names first. The healthy run's verdict is kept
# apart: the GPU is time-shared, so it says how quiet the shared GPU is.
doctor_sizes="--size 4M -n 10 -w 2 --latency-iters 50 --skew-ops 10 --budget 150s"
doctor_cells_ok() {  # doctor_cells_ok JSON N: every pair measured, bytes right
  python3 - "$1" "$2" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
cells = doc["cells"]
bad = [c for c in cells if c.get("error") or c["wrong"] or
       c["bandwidth_gbps"] <= 0 or c["latency_us"] <= 0]
print(f"{len(cells)} cells, {len(bad)} bad, healthy={doc['healthy']}, "
      f"findings={[(f['blame'], f['ranks']) for f in doc['findings']]}")
sys.exit(0 if len(cells) == n * (n - 1) and not bad else 1)
PY
}
doctor_throttled() {  # doctor_throttled PID RANK: names RANK first
  local pid=$1 rank=$2 rc
  (while :; do kill -STOP "$pid"; sleep 0.022; kill -CONT "$pid"; sleep 0.002; done) &
  local throttle=$!
  # shellcheck disable=SC2086
  "$ccctl" doctor $doctor_sizes -o json >"$OUT/doctor_throttled.json"
  rc=$?
  kill "$throttle"; wait "$throttle" 2>/dev/null; kill -CONT "$pid"
  echo "exit status $rc"
  python3 - "$OUT/doctor_throttled.json" "$rank" <<'PY'
import json, sys
findings = json.load(open(sys.argv[1]))["findings"]
for f in findings:
    print(f["blame"], f["ranks"], f["metric"], f["value"], f["reference"], f["evidence"])
first = findings[0] if findings else {}
sys.exit(0 if first.get("blame") == "rank" and first.get("ranks") == [int(sys.argv[2])] else 1)
PY
}
export -f doctor_cells_ok doctor_throttled
simhosts_doctor() {
  export CCL_TEST_SIMULATED_HOSTS=1 ccctl doctor_sizes
  # CCL_DOCTOR_DEVICE=cpu tries the steps without a GPU.
  step doctor_cluster_up_4 180 "$ccctl" cluster up --workers 4 \
    --device "${CCL_DOCTOR_DEVICE:-cuda:0}"
  # shellcheck disable=SC2086
  step doctor_healthy_4 240 bash -c "'$ccctl' doctor $doctor_sizes -o json \
    --svg '$OUT/doctor_healthy.svg' >'$OUT/doctor_healthy.json'; \
    echo exit status \$?; doctor_cells_ok '$OUT/doctor_healthy.json' 4"
  step doctor_table_4 240 bash -c "'$ccctl' doctor $doctor_sizes; rc=\$?; \
    echo exit status \$rc; [[ \$rc == 0 || \$rc == 3 ]]"
  local pid
  pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['workers'][2])" \
    "$CCCTL_STATE_DIR/state.json")
  step doctor_throttled_rank2_4 240 bash -c "doctor_throttled $pid 2"
  step doctor_cluster_down_4 60 "$ccctl" cluster down
  cp -r "$CCCTL_STATE_DIR" "$OUT/doctor-logs" 2>/dev/null || true
}

simhosts_clusters() {
  export CCL_TEST_SIMULATED_HOSTS=1
  local n op yaml
  for n in 4 2; do
    step "cluster_up_$n" 180 "$ccctl" cluster up --workers "$n" --device cuda:0
    step "status_$n" 30 "$ccctl" status
    step "allreduce_sum_$n" 60 bash -c "'$ccctl' allreduce --op sum | tee /dev/stderr | grep -c '\[$((n * (n + 1) / 2)).0\]' | grep -qx $n"
    if [[ $n == 4 ]]; then
      for yaml in "$root"/examples/*.yaml; do
        step "run_$(basename "$yaml" .yaml)_4" 180 "$ccctl" run "$yaml"
      done
      step group_create_4 60 "$ccctl" group create pair --ranks 3,1
      step group_allreduce_4 60 bash -c "'$ccctl' --group pair allreduce --op sum | tee /dev/stderr | grep -c '\[6.0\]' | grep -qx 2"
    fi
    # Every op checked on the device (-c 1), a few sizes up to 16 MiB.
    for op in ${ops//,/ }; do
      step "bench_check_${op}_$n" 180 "$ccctl" bench "$op" -b 8 -e 16M -f 64 \
        -n 2 -w 1 -c 1
    done
    step "cluster_down_$n" 60 "$ccctl" cluster down
    cp -r "$CCCTL_STATE_DIR" "$OUT/cluster-logs-$n" 2>/dev/null || true
  done
  CCL_TEST_WORKERS=4 python_steps
  if grep -q "^grpcio" "$OUT/python_imports.log" 2>/dev/null; then
    # A short chaos run on CUDA workers: kills, stops, client faults.
    step chaos_cuda 300 env PYTHONPATH="$bundle/python:$root/tests/chaos" \
      CCL_BINARY_CCWORKER="$bundle/bin/ccworker" \
      CCL_BINARY_CCCOORD="$bundle/bin/cccoord" python3 \
      "$root/tests/chaos/chaos.py" --device cuda:0 --workers 3 --clients 2 \
      --duration 90 --faults kill,stop,client --netns off --op-timeout 8 \
      --out "$OUT/chaos"
  fi
}

# A gather on a fresh cluster one of whose members was just killed: the
# survivors' op ends at its own timeout (5 s), not after NCCL's socket
# connect retries (about a minute, which also held up the re-form).
dead_peer_gather() {
  local device=${1:-cuda:0} pid start rc
  "$ccctl" cluster up --workers 3 --device "$device" || return 1
  if ! "$ccctl" tensor alloc dpg.x --shape 4 --fill rank+1 ||
    ! "$ccctl" tensor alloc dpg.y --shape 12; then
    "$ccctl" cluster down
    return 1
  fi
  pid=$(python3 -c 'import json, os; print(json.load(open(os.environ["CCCTL_STATE_DIR"] + "/state.json"))["workers"][2])')
  kill -9 "$pid"
  start=$SECONDS
  timeout 120 "$ccctl" --timeout 5s gather -i dpg.x --output dpg.y
  rc=$?
  echo "gather with a killed member ended after $((SECONDS - start)) s (rc=$rc)"
  "$ccctl" cluster down
  [[ $rc -ne 0 && $rc -ne 124 && $((SECONDS - start)) -le 30 ]]
}
export -f dead_peer_gather

# Issue 42 on CUDA workers, each a simulated host: the op after a failure
# (a lone recv, an op timeout, a killed and replaced worker) just works, and
# a client killed holding reserved seqs stalls nobody.
after_failure_steps() {
  export CCL_TEST_SIMULATED_HOSTS=1
  step dead_peer_gather 180 bash -c dead_peer_gather
  step python_after_failure 240 env PYTHONPATH="$bundle/python" \
    CCL_TEST_DEVICE=cuda CCL_TEST_WORKERS=3 CCL_SOURCE_DIR="$root" \
    PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider -rs \
    "$root/client/python/tests/test_errors.py" -k "just_works or killed_holding"
  step after_failure_nccl_4 300 env CCL_FAILURE_WORKERS=4 \
    CCL_FAILURE_REPEATS="${CCL_FAILURE_REPEATS:-1}" \
    "$bundle/bin/failure_nccl_test" \
    --gtest_filter='*JustWorks*:*AReplacementStartedAtOnce*'
}

torch_steps() {
  local torch_ops=all_reduce,all_gather,reduce_scatter,broadcast,alltoall,sendrecv
  step torch_nccl 400 python3 "$root/bench/peers/torch_nccl.py" \
    --ops "$torch_ops" -b 8 -e 2G -f 4 -n 20 -w 5 --csv-dir "$OUT"
}

{ nvidia-smi; nvidia-smi topo -m; } >"$OUT/nvidia-smi.log" 2>&1 || true
ldd "$bundle/bin/ccworker" >"$OUT/ldd-ccworker.log" 2>&1 || true
# The peers run once the cluster is down, so they never share the GPUs.
case $mode in
  run) checks_steps; cluster_steps; python_steps; peer_steps; torch_steps ;;
  quick) CCL_FAILURE_REPEATS=${CCL_FAILURE_REPEATS:-2} checks_steps
    CCL_GPU_QUICK=1 cluster_steps; peer_steps ;;
  peer) peer_steps ;;
  simhosts) simhosts_suites; simhosts_failures; simhosts_clusters ;;
  simhosts1) simhosts_suites ;;
  simhosts2) simhosts_failures ;;
  simhosts3) simhosts_clusters ;;
  simhostsdoctor) simhosts_doctor ;;
  afterfailure) after_failure_steps ;;
  samehost) CCL_TEST_SIMULATED_HOSTS=1 step same_host_refused 180 bash -c same_host_refused ;;
  python) python_steps ;;
  # `run` in two halves, for when one command may not take the whole verdict.
  ours) checks_steps; cluster_steps; python_steps ;;
  peers) peer_steps; torch_steps ;;
  # `ours` took over 600 s on 2 x H200 (one device call's limit): in pieces.
  checks) checks_steps ;;
  cluster) cluster_steps ;;
  # What a client pays per op, alone on a fresh cluster (a few minutes).
  # latency1: the same on one GPU (a 1-worker cluster), for when only a
  # 1-GPU machine is lent: the RPC and worker shares without a peer.
  # Then again with workers and client that spin between ops
  # (--busy-poll-us 1000, CCL_CLIENT_BUSY_POLL_US=1000:
  # bench/results/latency_vcpu_idle_1gpu_2026-12-03.md), steps "_poll".
  latency|latency1)
    for poll in 0 1000; do
      suffix=$([[ $poll == 0 ]] || echo _poll)
      step "cluster_up$suffix" 120 env CCL_BUSY_POLL_US=$poll "$ccctl" cluster up \
        --workers "$([[ $mode == latency1 ]] && echo 1 || echo 2)" --device cuda
      # The client polls too in the second pass (CCL_CLIENT_BUSY_POLL_US).
      export CCL_CLIENT_BUSY_POLL_US=$poll
      step "bench_e2e_all_reduce$suffix" 120 "$ccctl" bench all_reduce -b 8 \
        -e 1M -f 4 -n 200 -w 20 --e2e --csv "$OUT/e2e_all_reduce$suffix.csv"
      latency_steps "$suffix"
      unset CCL_CLIENT_BUSY_POLL_US
      step "cluster_down$suffix" 60 "$ccctl" cluster down
      cp -r "$CCCTL_STATE_DIR" "$OUT/latency-logs$suffix" 2>/dev/null || true
    done ;;
  *) echo "usage: $0 [build|run|quick|peer|python|ours|peers|checks|cluster|latency|latency1|simhosts|simhosts1|simhosts2|simhosts3|simhostsdoctor|afterfailure|samehost]" >&2; exit 2 ;;
esac
report
exit $((failures > 100 ? 100 : failures))
