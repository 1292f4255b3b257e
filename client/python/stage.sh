#!/usr/bin/env bash
# Stages the Python package `ccl` into OUTDIR (OUTDIR/ccl): its sources plus
# the stubs protoc and grpc_python_plugin generate from proto/ccl/v1.
# Debian's python3-grpc-tools (1.14) rejects proto3 `optional`, so the stubs
# come from protoc with the plugin of protobuf-compiler-grpc.
# Usage: client/python/stage.sh OUTDIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: stage.sh OUTDIR}
protoc=${PROTOC:-protoc}
plugin=${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin || true)}
command -v "$protoc" >/dev/null || { echo "stage.sh: no protoc (Debian: protobuf-compiler)" >&2; exit 1; }
[[ -n $plugin && -x $plugin ]] || { echo "stage.sh: no grpc_python_plugin (Debian: protobuf-compiler-grpc)" >&2; exit 1; }

# Build aside and swap in, so a reader never sees a half-staged package.
mkdir -p "$out"
tmp=$(mktemp -d "$out/.stage-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ccl/v1"
cp "$here"/ccl/*.py "$tmp/ccl/"
"$protoc" -I "$root/proto" --python_out="$tmp" --grpc_python_out="$tmp" \
  --plugin=protoc-gen-grpc_python="$plugin" \
  "$root"/proto/ccl/v1/common.proto "$root"/proto/ccl/v1/coordinator.proto \
  "$root"/proto/ccl/v1/worker.proto
echo '"""Generated from proto/ccl/v1 by protoc; do not edit."""' >"$tmp/ccl/v1/__init__.py"
rm -rf "$out/ccl"
mv "$tmp/ccl" "$out/ccl"
