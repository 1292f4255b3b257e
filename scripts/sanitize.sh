#!/usr/bin/env bash
# Builds with ASan + UBSan (the `asan` preset, into build-asan/) and runs the
# unit and integration suites under it (not the GPU or Docker ones: the
# Docker test runs the images, not these binaries). Extra arguments go to ctest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "${JOBS:-2}"
ctest --preset asan -j "${JOBS:-2}" "$@"
