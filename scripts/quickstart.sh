#!/usr/bin/env bash
# The README's main command: builds, starts a local cluster (a coordinator and
# 4 CPU workers on 127.0.0.1, Gloo backend), shows it, runs a real all_reduce
# through ccctl and stops the cluster (--keep leaves it running).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
workers=${WORKERS:-4}
keep=0
[[ "${1:-}" == "--keep" ]] && keep=1

# Only what it runs: the tests' binaries are most of the build, and
# scripts/test.sh builds them when it needs them.
"$root/scripts/build.sh" cccoord ccworker ccctl
ccctl="$build_dir/client/ccctl"
export CCCTL_STATE_DIR=${CCCTL_STATE_DIR:-$build_dir/cluster}

"$ccctl" cluster up --workers "$workers"
if [[ $keep -eq 0 ]]; then
  trap '"$ccctl" cluster down >/dev/null' EXIT
fi
echo
echo "\$ ccctl status"
"$ccctl" status
echo
echo "\$ ccctl allreduce --op sum      # each rank holds [rank+1]"
"$ccctl" allreduce --op sum
if [[ $keep -eq 1 ]]; then
  echo
  echo "The cluster keeps running: CCCTL_STATE_DIR=$CCCTL_STATE_DIR $ccctl status"
  echo "Stop it with: CCCTL_STATE_DIR=$CCCTL_STATE_DIR $ccctl cluster down"
fi
