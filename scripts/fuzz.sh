#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan; the `fuzz` preset) and
# runs each for FUZZ_SECONDS (default 60) from its seed corpus in
# tests/fuzz/<target>/. What the run discovers goes to a temp dir, so the
# committed corpus stays the small seed set; a crash leaves its input in
# $FUZZ_ARTIFACTS (default build-fuzz/artifacts) and fails the script.
# Needs clang and libclang-rt-14-dev (libFuzzer's runtime) besides setup.sh's.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
seconds=${FUZZ_SECONDS:-60}
artifacts=${FUZZ_ARTIFACTS:-$root/build-fuzz/artifacts}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
mkdir -p "$artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The two targets run side by side (one core each on CI's two): the step
# takes FUZZ_SECONDS instead of twice that. Each one's output is printed
# whole once it ends, so the two do not interleave.
names=() pids=() logs=()
for target in worker_request_fuzzer coordinator_request_fuzzer; do
  work=$(mktemp -d)
  log=$(mktemp)
  echo "fuzz: $target for ${seconds}s" >&2
  # -timeout: one input running this long is a hang (ops and waits here time
  # out in well under a second). Leaks are not checked per input: each
  # harness keeps one worker or coordinator for the whole run, as the daemon
  # does.
  (
    status=0
    "$root/build-fuzz/tests/fuzz/$target" -max_total_time="$seconds" \
      -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$artifacts/$target-" \
      "$work" "$root/tests/fuzz/$target" >"$log" 2>&1 || status=$?
    rm -rf "$work"
    exit "$status"
  ) &
  names+=("$target") pids+=($!) logs+=("$log")
done
failed=0
for i in "${!pids[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  echo "fuzz: ---- ${names[$i]} (exit $status) ----" >&2
  cat "${logs[$i]}" >&2
  rm -f "${logs[$i]}"
  if ((status != 0)); then
    echo "fuzz: ${names[$i]} failed (exit $status); inputs in $artifacts" >&2
    failed=1
  fi
done
exit "$failed"
