#!/usr/bin/env bash
# Installs the Python client (import name ccl) for Debian's /usr/bin/python3,
# on a fresh Debian 12 machine in one command (nothing from PyPI):
#
#   scripts/install-python.sh                 # root: /usr/local/lib/python3.X/dist-packages
#                                             # else:  ~/.local/lib/python3.X/site-packages
#   scripts/install-python.sh --target DIR    # into DIR; then PYTHONPATH=DIR
#   scripts/install-python.sh --no-apt ...    # skip the Debian packages check
#
# It installs what is missing of python3-grpcio, python3-protobuf,
# python3-numpy, protobuf-compiler and protobuf-compiler-grpc (scripts/setup.sh
# --python), generates the gRPC stubs from proto/ with protoc and
# grpc_python_plugin (Debian's python3-grpc-tools rejects proto3 `optional`),
# and copies the package. CCL_PYTHON picks another interpreter with grpcio,
# protobuf and numpy.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${CCL_PYTHON:-/usr/bin/python3}
target=""
apt=1
while (($#)); do
  case $1 in
    --target) target=${2:?--target needs a directory}; shift 2 ;;
    --no-apt) apt=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "install-python.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if ((apt)); then "$root/scripts/setup.sh" --python; fi
[[ -x $python ]] || { echo "install-python.sh: no interpreter at $python (set CCL_PYTHON)" >&2; exit 1; }
if [[ -z $target ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    target=$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  else
    target=$("$python" -m site --user-site)
  fi
fi
mkdir -p "$target"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
"$root/client/python/stage.sh" "$stage"
rm -rf "$target/ccl"
cp -r "$stage/ccl" "$target/ccl"
# Checked from / with only the target added, so the source tree cannot
# stand in for what was installed.
(cd / && PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$python" -c \
  'import ccl, ccl.v1.worker_pb2_grpc; print(f"ccl {ccl.__version__} installed in {ccl.__path__[0]}")')
