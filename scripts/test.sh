#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test but the GPU ones (those run on the GPU machine: scripts/gpu-check.sh)
# and the Docker one (label docker: it installs and starts an engine and
# builds the images; .ci/run runs it, and so does `ctest -L docker`), and
# the randomized chaos run (label chaos: `ctest -L chaos`; tests/chaos/;
# its fixed-seed run, chaos_seeded_test, is in).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
cd "$build_dir"
ctest --output-on-failure -LE "gpu|docker|chaos" -j "${JOBS:-2}" --timeout 600 "$@"
