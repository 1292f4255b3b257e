#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR) with two jobs: everything,
# or only the targets given (scripts/quickstart.sh needs the three binaries).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
if (($# > 0)); then
  "$root/scripts/setup.sh" --build
else
  "$root/scripts/setup.sh"
fi
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
if (($# > 0)); then
  cmake --build "$build_dir" -j "${JOBS:-2}" --target "$@"
else
  cmake --build "$build_dir" -j "${JOBS:-2}"
fi
