#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test but the GPU ones (those run on the GPU machine: scripts/gpu-check.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
cd "$build_dir"
ctest --output-on-failure -LE gpu -j "${JOBS:-2}" --timeout 600 "$@"
